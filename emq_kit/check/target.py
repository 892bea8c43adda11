"""``open_target``, the one way check, replay, bench and selftest get a target (the
surface the machine drives beside the model: ``emq_kit.targets.protocol``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from emq_kit.errors import BadArgument, FencedElsewhere, ServerUnreachable, TargetUnavailable
from emq_kit.targets.protocol import Target

if TYPE_CHECKING:
    from emq_kit.check.names import Names


def open_target(url: str | None = None, scripts: str | None = None, driver: str | None = None, *,
                clock: str = "virtual", timeout: float | None = None, observe: bool = True, partial: bool = False,
                names: Names | None = None, model: bool = False) -> Target:
    """The live client on ``url`` (embedded fakeredis when None) running ``scripts`` (ours
    when None), or the port behind ``driver`` (emq_kit/ports/driver_client.py; with
    ``partial`` a driver may lack ops outside the core, DP-9a), or with ``model`` the
    model itself (``ModelTarget``: the machine alone, bench's ceiling and the backend of
    ``emq driver --model``). Every way
    it can fail to exist is a ``TargetUnavailable`` (``BadArgument`` for arguments that
    do not go together); nothing else escapes. ``names``: the run's names on a server
    (``emq_kit.check.names``, from its claim): the target is seen through them
    (``Renamed``), and a driver's ``init`` names the machine's queues by them;
    ``timeout``: a driver's bound on each request, ``init`` included (None: DP-14's
    defaults)."""
    if driver is not None and scripts is not None:
        raise BadArgument("--scripts is for the built-in client; a driver loads its own scripts")
    if model:
        if url is not None or scripts is not None or driver is not None:
            raise BadArgument("the model is its own target: no URL, scripts or driver")
        from emq_kit.check.model_target import ModelTarget

        return ModelTarget()  # before the client's imports: a serverless driver starts without redis-py
    import redis

    from emq_kit.check.live import LiveTarget
    from emq_kit.check.names import with_names
    from emq_kit.check.pools import QUEUES
    from emq_kit.ports.driver_client import DriverError, DriverTarget
    from emq_live.urls import redact
    from emq_model.errors import EmqError, VersionError

    try:
        if driver is not None:
            queues = QUEUES if names is None else tuple(names.server(q) for q in QUEUES)
            return with_names(DriverTarget(driver, url, clock=clock, timeout=timeout, partial=partial, queues=queues),
                              names, QUEUES)
        return with_names(LiveTarget(url, scripts, observe=observe), names, QUEUES)
    except DriverError as exc:
        raise TargetUnavailable(str(exc)) from None
    except (FileNotFoundError, ConnectionError, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
            ValueError) as exc:
        raise unavailable(exc, url) from None
    except VersionError as exc:
        raise FencedElsewhere(f"{redact(str(url))}: {exc}") from None
    except EmqError as exc:
        raise TargetUnavailable(f"{redact(str(url))}: {exc}") from None
    except redis.exceptions.ResponseError as exc:
        raise TargetUnavailable(f"{redact(str(url))} refused to load the scripts: {exc}") from None


def unavailable(exc: Exception, url: str | None) -> TargetUnavailable:
    """The one line for an environment error met opening a target on ``url`` (redacted):
    scripts not found, a URL the client does not serve, a server out of reach
    (``ServerUnreachable``: the client's ``ConnectError``, redis-py's connection or
    timeout error), a bad URL (any other ``ValueError``)."""
    from emq_live.urls import ConnectError, UrlError, redact

    if isinstance(exc, FileNotFoundError):
        return TargetUnavailable(f"scripts: {exc}")
    if isinstance(exc, UrlError):
        return TargetUnavailable(str(exc))
    if isinstance(exc, ConnectError):  # already names the URL, redacted
        return ServerUnreachable(str(exc))
    if isinstance(exc, ValueError):
        return TargetUnavailable(f"bad URL {redact(str(url))!r}: {exc}")
    return ServerUnreachable(f"cannot reach {redact(str(url))}: {exc}")
