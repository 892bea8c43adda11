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

from emq_kit import bounds
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

NUMBERS = {"examples": int, "steps": int, "depth": int, "seed": int, "shrink_steps": int, "timeout": float}
"""The numeric options and their type; each option's range is ``bounds``' ``check --<flag>``."""


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
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise _refused(name, f"not a sequence of names: {value!r}")
            object.__setattr__(self, name, tuple(value))
        for name, kind in NUMBERS.items():
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
                raise _refused(name, f"not {'a number' if kind is float else 'an integer'}: {value!r}")
            why = bounds.bound(f"check --{_flag(name)}").refusal(value)
            if why is not None:
                raise _refused(name, why)
        for name in ("url", "scripts", "driver", "expect", "traces"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise _refused(name, f"not a string: {getattr(self, name)!r}")
        for name in ("wipe", "refence", "first", "strict", "corpus"):
            if not isinstance(getattr(self, name), bool):
                raise _refused(name, f"not True or False: {getattr(self, name)!r}")
        for name, choices in (("clock", CLOCKS), ("layout", LAYOUTS), ("profile", sorted(PROFILES)),
                              ("hostile", HOSTILE)):
            if getattr(self, name) not in choices:
                raise _refused(name, f"invalid choice: {getattr(self, name)!r} "
                                     f"(choose from {', '.join(map(repr, choices))})")
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
        """These options with ``changes``, checked again."""
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
            parts += ["--" + _flag(name), redact(str(one)) if name == "url" else str(one)]
    parts += ["--" + name for name in RERUN_SWITCHES if getattr(options, name)]
    return shlex.join(parts)


def _flag(name: str) -> str:
    return FLAG.get(name, name).replace("_", "-")


def _refused(name: str, why: str) -> BadArgument:
    """``argument --FLAG: WHY``, as the command line's parser words a bad argument."""
    return BadArgument(f"argument --{_flag(name)}: {why}")
