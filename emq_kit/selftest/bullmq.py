"""The selftest's teeth on BullMQ's scripts: the same mutation operators
(``emq_kit/selftest/mutation.py``) applied to the pinned bullmq package's scripts that the
layout calls (bullmq.json ``scripts``), each mutant copied with the rest of the package's
``commands/`` into a temp dir, loaded by the same target (``BullTarget(scripts=dir)``)
and judged by the bullmq layout's machine within a budget.

BullMQ's scripts are bundled (every helper a ``local function`` inlined into each file):
most of a file serves features the run does not configure (flows and parents, the rate
limiter, repeatable jobs, metrics, deduplication), so a mutant there survives by
construction; ``where`` names the function a mutated line sits in, the reason a survivor
is listed with. The event stream is outside the layout's projection (bullmq.json
``auxiliary.events``): XADD is not among the writes deleted.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from emq_kit.selftest.mutation import Mutant, MutantVerdict, judge, mutants_of, require_verdict, sampled

_RCALL = re.compile(r'^\s*(?:local \w+ = |return )?rcall\("(\w+)"')
WRITES = ("LPUSH", "RPUSH", "LREM", "ZADD", "ZREM", "SADD", "SREM", "HSET", "HMSET", "HDEL", "DEL",
          "HINCRBY", "SET", "INCR", "PEXPIRE", "RPOPLPUSH", "ZPOPMIN")
_FUNCTION = re.compile(r"^\s*local function (\w+)|^\s*function (\w+)")


def commands() -> Path:
    """The installed bullmq package's script directory."""
    import bullmq

    return Path(bullmq.__file__).parent / "commands"


def scripts() -> list[str]:
    """The scripts the layout calls (file stems, as a mutant names its script)."""
    from emq_model.layouts.bullmq import table

    return [entry["file"].removesuffix(".lua") for entry in table()["scripts"].values()]


def all_mutants() -> list[Mutant]:
    """Every mutant of every script the layout calls."""
    out: list[Mutant] = []
    for stem in scripts():
        out.extend(mutants_of(stem, _uncommented((commands() / f"{stem}.lua").read_text("utf-8")), _RCALL, WRITES))
    return out


def _uncommented(text: str) -> str:
    """``text`` with the lines of ``--[[ ... ]]`` block comments blanked (line numbers
    kept): BullMQ documents KEYS and ARGV in one, and an edit there changes nothing."""
    out, inside = [], False
    for line in text.split("\n"):
        starts = line.lstrip().startswith("--[[")
        out.append("" if inside or starts else line)
        if starts or inside:
            inside = "]]" not in line
    return "\n".join(out)


def where(mutant: Mutant) -> str:
    """The function the mutated line sits in (``main`` for the script's body)."""
    lines = (commands() / f"{mutant.script}.lua").read_text("utf-8").split("\n")
    # bundled helpers come first, each closed by an "end" at column 0, and the body last
    for n in range(mutant.line - 1, -1, -1):
        if lines[n] == "end":
            return "main"
        found = _FUNCTION.match(lines[n])
        if found:
            return found.group(1) or found.group(2)
    return "main"


def chosen_mutants(seed: int, sample: int | None = None, only: str | None = None) -> list[Mutant]:
    """The mutants a selftest judges: those whose key contains ``only``, then a seeded
    sample of ``sample`` of them when given (the same for a serial run and a cluster's)."""
    return sampled([m for m in all_mutants() if not only or only in m.key], seed, sample)


def placed(v: MutantVerdict) -> MutantVerdict:
    """``v``, a survivor's reason naming the function its line sits in."""
    if v.status == "survived":
        v.reason = f"{v.reason or 'no divergence'}; in {where(v.mutant)}()"
    return v


def run_selftest(url: str, budget: float, seed: int, sample: int | None = None, only: str | None = None,
                 report: Callable[[MutantVerdict], None] | None = None, names: Any = None) -> list[MutantVerdict]:
    """Judge the mutants ``chosen_mutants`` gives with the bullmq layout's machine on
    ``url``. A survivor's reason names where its line sits. The queue goes under
    ``names``, the run's."""
    from emq_kit.layouts import layout

    chosen = chosen_mutants(seed, sample, only)
    verdicts = []
    for k, mutant in enumerate(chosen, 1):
        v = placed(require_verdict(judge(mutant, url, budget, seed, commands(), layout("bullmq"), names), k, len(chosen)))
        verdicts.append(v)
        if report:
            report(v)
    return verdicts
