"""What one check is asked to do, as a value: ``CheckOptions`` holds every option of
``emq check`` typed, and refuses a bad one when it is made (``BadArgument``, one line
naming the option as the command line does; numeric ranges from ``emq_kit.bounds``,
BD-1), before anything runs or is written. The command line, the pytest plugin and a
campaign's tasks each build one and hand it to ``emq_kit.check``; it is frozen and
pickles. ``command`` writes one back as the ``emq check`` line that repeats a run.

    >>> from emq_kit import CheckOptions
    >>> options = CheckOptions(profile="dev", examples=20, hostile="off")
    >>> options.command(seed=7)
    'emq check --seed 7 --profile dev --examples 20 --hostile off'
    >>> CheckOptions(examples=0)
    Traceback (most recent call last):
    ...
    emq_kit.errors.BadArgument: argument --examples: must be at least 1, got 0
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from typing import Any

from emq_kit import arguments
from emq_kit.check.focus import HOSTILE
from emq_kit.check.names import named
from emq_kit.check.pools import QUEUES
from emq_kit.check.profiles import PROFILES
from emq_kit.check.tally import SHRINK_STEPS
from emq_kit.errors import BadArgument
from emq_kit.layouts import NAMES as LAYOUTS
from emq_kit.ports.protocol import KEY_FAULT_OPS
from emq_model import spec

CLOCKS = ("virtual", "server")

CORE = ("enqueue", "claim", "complete")
"""The queue ops the machine cannot do without (DP-9b's core, less the session)."""
KITSIDE = frozenset({"forget_row", *KEY_FAULT_OPS})
"""The faults the kit injects itself when it reads a driver's server."""
EVERY_OP = frozenset(spec.OPS) | frozenset(spec.LANE_OPS) | {"queue"} | KITSIDE
"""What ``ops`` and ``skip_ops`` may name."""

RERUN_FLAGS = ("layout", "url", "queues", "scripts", "driver", "timeout", "clock", "examples", "steps", "depth", "ops",
               "skip_ops", "hostile", "expect", "traces", "shrink_steps")
"""The options a run's rerun line repeats, in its order, when not at their defaults (a
URL's password redacted); then the switches ``RERUN_SWITCHES``. ``wipe`` is never
repeated: deleting a user's keys is asked for each time."""
RERUN_SWITCHES = ("first", "strict", "refence")
FLAG = {"queues": "queue"}
"""An option's flag where it is not the option's name (``--queue``, once per queue)."""

NUMBERS = ("examples", "steps", "depth", "seed", "shrink_steps", "timeout")
"""The numeric options; each option's range (and whether it counts or is seconds) is
``bounds``' ``check --<flag>``."""
WIPE_NEEDS_URL = "--wipe lets the run delete keys a server already holds: it needs --url"
"""A ``--wipe`` without a server would do nothing: refused, never ignored."""
OPTIONAL = frozenset({"examples", "steps", "seed", "timeout"})
"""The numeric options ``None`` leaves to the run: the profile's, a random seed, a
driver's own timeout."""


@dataclass(frozen=True)
class CheckOptions:
    """Every option of one check, as ``emq check`` names them (``emq check --help`` says
    what each does). ``None`` is the option not given: the profile's ``examples`` and
    ``steps``; a random ``seed`` (the report has it); a driver's own ``timeout``
    (DP-14). ``depth``: background jobs in each queue before every example
    (specs/lifecycle.md DEPTH-1). ``queues`` are the run's names of the machine's queues on the server
    (``--queue``, once per queue); ``ops`` and ``skip_ops`` narrow what is sent."""

    url: str | None = None
    scripts: str | None = None
    driver: str | None = None
    timeout: float | None = None
    clock: str = "virtual"
    layout: str = "echomq"
    profile: str = "ci"
    examples: int | None = None
    steps: int | None = None
    depth: int = 0
    seed: int | None = None
    shrink_steps: int = SHRINK_STEPS
    wipe: bool = False
    refence: bool = False
    queues: tuple[str, ...] = ()
    traces: str = ".emq/traces"
    first: bool = False
    ops: tuple[str, ...] = ()
    skip_ops: tuple[str, ...] = ()
    hostile: str = "both"
    expect: str | None = None
    strict: bool = False
    corpus: bool = True  # replay the traces already in ``traces`` first (emq_kit/check/corpus.py)

    def __post_init__(self) -> None:
        for name in ("queues", "ops", "skip_ops"):  # a list is as good as a tuple; the value stays hashable
            object.__setattr__(self, name, arguments.names(_flag(name), getattr(self, name)))
        for name in NUMBERS:
            arguments.number(f"check {_flag(name)}", getattr(self, name), optional=name in OPTIONAL)
        arguments.url(self.url)
        for name in ("scripts", "driver", "expect", "traces"):
            arguments.text(_flag(name), getattr(self, name), optional=name != "traces")
        for name in ("wipe", "refence", "first", "strict", "corpus"):
            arguments.switch(_flag(name), getattr(self, name))
        for name, choices in (("clock", CLOCKS), ("layout", LAYOUTS), ("profile", sorted(PROFILES)),
                              ("hostile", HOSTILE)):
            arguments.choice(_flag(name), getattr(self, name), choices)
        for name in ("ops", "skip_ops"):
            unknown = set(getattr(self, name)) - EVERY_OP
            if unknown:
                raise BadArgument(f"unknown ops {', '.join(sorted(unknown))}; ops are "
                                  f"{', '.join([*spec.OPS, *spec.LANE_OPS])}")
        self._together()

    def _together(self) -> None:
        """Options that need another: each refusal says which."""
        if self.clock == "server" and self.url is None:
            raise BadArgument("--clock server needs a server: give --url")
        if self.wipe and self.url is None:
            raise BadArgument(WIPE_NEEDS_URL)
        if self.strict and not self.expect:
            raise BadArgument("--strict needs --expect FILE: it fails the run on an expected difference not met")
        if self.refence and (self.url is None or self.layout != "echomq"):
            raise BadArgument("--refence sets {emq}:version on a server for the run: it needs --url (and the "
                              "echomq layout)")
        if self.layout == "bullmq" and self.url is None and self.driver is None:
            from emq_live.layouts.bullmq import NO_CMSGPACK  # BullMQ's scripts need a server's cmsgpack

            raise BadArgument(NO_CMSGPACK)
        if self.depth and self.layout != "echomq":
            raise BadArgument("--depth fills the four-set layout's queues: it needs the echomq layout")
        if self.queues:
            if self.layout != "echomq" or self.url is None:
                raise BadArgument("--queue names the run's queues on a server: it needs --url (and the echomq "
                                  "layout)")
            named(QUEUES, list(self.queues))

    def given_names(self) -> dict[str, str] | None:
        """The user's names of the machine's queues on the server (``queues``), or None:
        every queue name then carries the run's suffix (``emq_kit.check.names``)."""
        return named(QUEUES, list(self.queues)) if self.queues else None

    def replace(self, **changes: Any) -> CheckOptions:
        """These options with ``changes``, checked again (a name that is no option:
        ``BadArgument``)."""
        arguments.given(changes, [f.name for f in dataclasses.fields(self)], "options")
        return dataclasses.replace(self, **changes)

    def command(self, seed: int) -> str:
        """The ``emq check`` line that repeats a run of these options from ``seed``."""
        return command_of(seed, self.profile, self)

    def __repr__(self) -> str:
        """Every option, the URL's password masked: options a log line or a traceback
        prints show none (SEC-1)."""
        from emq_live.urls import redact

        shown = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.url is not None:
            shown["url"] = redact(self.url)
        return f"CheckOptions({', '.join(f'{name}={value!r}' for name, value in shown.items())})"


def command_of(seed: int, profile: str, options: CheckOptions | None = None) -> str:
    """``emq check --seed SEED --profile PROFILE`` with every other option ``options``
    sets (``RERUN_FLAGS``; a URL's password redacted: give it again, or set EMQ_URL)."""
    from emq_live.urls import redact

    parts = ["emq", "check", "--seed", str(seed), "--profile", profile]
    if options is None:
        return shlex.join(parts)
    defaults = CheckOptions()
    for name in RERUN_FLAGS:
        value = getattr(options, name)
        if value in (None, (), getattr(defaults, name)):
            continue
        if name in ("ops", "skip_ops"):
            value = ",".join(value)
        for one in value if name == "queues" else [value]:  # --queue: once per queue
            parts += [_flag(name), redact(str(one)) if name == "url" else str(one)]
    parts += ["--" + name for name in RERUN_SWITCHES if getattr(options, name)]
    return shlex.join(parts)


def _flag(name: str) -> str:
    """The option ``name``'s flag: ``--skip-ops``."""
    return "--" + FLAG.get(name, name).replace("_", "-")
