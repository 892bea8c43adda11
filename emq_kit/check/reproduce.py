"""A difference is listed only if its trace reproduces it (specs/trace.md TR-7).

After the search and the minimizer, each difference's steps are replayed on the reset
target, exactly as ``emq replay`` replays its trace file (the layout's replay, in the
run's clock mode): first with the job ids renamed to the trace's stable names (TR-5),
then, should that not show the difference, with the ids the run used. The difference
is reproduced when a replay diverges with its signature — under the server clock two
replays in a row, as the minimizer demands of its candidates: a signature one replay in
three shows hangs on where a deadline fell in a clock window — and the trace written is
that replay's, so the signature printed is the trace's. Up to ``TRIES`` rounds are
tried (a server-clock replay meets other clock windows each time); one that never shows
its signature so — it conforms, or diverges earlier at another difference — is kept
apart, as *did not reproduce*, with what each replay showed, and never listed as a
difference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from emq_kit.check.signature import Signature, signature
from emq_kit.check.step import Step
from emq_kit.trace.format import renamed, renaming

TRIES = 3
"""Rounds of replays before a difference counts as not reproduced: a virtual-clock
replay is exact (one round decides); a server-clock one meets other clock windows."""

Replay = Callable[[list[Step], Any, Any], Any]  # a layout's replay: steps, target, clock -> Replayed


@dataclass
class Reproduction:
    """What replaying a difference's steps showed: ``replayed``, the replay that showed
    the signature (else the last one); ``names``, the renaming it ran under (old id ->
    new; empty: the run's ids); ``replays``, how many replays ran; ``seen``, what each
    replay that did not reproduce showed (``conforms`` or the signature it met)."""

    replayed: Any
    names: dict[str, str]
    replays: int
    reproduced: bool
    seen: list[str] = field(default_factory=list)


def reproduce(steps: list[Step], sig: Signature, target: Any, replay: Replay, clock: Any = None,
              tries: int = TRIES) -> Reproduction:
    """Replay ``steps`` on ``target`` (reset by ``replay``) until replays diverge with
    ``sig`` (one; under the server clock two in a row): renamed first, then with the
    run's ids, for up to ``tries`` rounds."""
    names = renaming(steps)
    plain = [Step(s.queue, s.op, s.args) for s in steps]
    candidates = [(renamed(plain, names), names), (plain, {})] if names else [(plain, {})]
    confirm = 2 if getattr(clock, "mode", "virtual") == "server" else 1
    seen: list[str] = []
    result: Any = None
    replays = 0
    for _ in range(tries):
        for candidate, used in candidates:
            for shown in range(1, confirm + 1):
                result = replay(candidate, target, clock)
                replays += 1
                found = result.divergence
                if found is None or signature(found) != sig:
                    seen.append("conforms" if found is None else str(signature(found)))
                    break
                if shown == confirm:
                    return Reproduction(result, used, replays, True, seen)
    return Reproduction(result, {}, replays, False, seen)


SHOWN = "shown"
"""What ``seen`` records of a replay that did show the difference, when the search saw the
same draws do otherwise (DET-1): it is listed apart all the same."""


def showed(seen: list[str]) -> str:
    """What the replays that did not reproduce showed, counted: ``conformed 2 times,
    diverged first at claim/EMQARG CC-5 1 time``."""
    counts: dict[str, int] = {}
    for what in seen:
        counts[what] = counts.get(what, 0) + 1
    return ", ".join(("conformed" if what == "conforms" else "showed it" if what == SHOWN
                      else f"diverged first at {what}")
                     + f" {n} time{'s' if n != 1 else ''}" for what, n in counts.items())
