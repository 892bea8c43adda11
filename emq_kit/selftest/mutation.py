"""``emq selftest``: the kit proves it has teeth. Mutants of our own transition scripts,
one documented operator edit each (specs/selftest.md), are each checked by the machine
within a budget; the report gives killed / survived, time-to-kill and the shrunk trace
length per mutant. A survivor is either listed as equivalent, with the reason
(``emq_kit/equivalent_mutants.json``), or a hole in the machine.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import re
import signal
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterator

from emq_kit import interrupts
from emq_kit.check import hang
from emq_kit.check.focus import Focus
from emq_kit.check.hang import stop_script
from emq_kit.check.names import Names
from emq_kit.check.profiles import Profile
from emq_kit.check.run import run_check
from emq_kit.errors import BadArgument, CheckFailed, KitBug, KitError, SearchFailed, ServerUnreachable
from emq_kit.forks import cpu_seconds, die_with_parent, interrupts_deferred
from emq_kit.layouts import Layout
from emq_kit.layouts import layout as layout_named
from emq_live import embedded
from emq_model import spec

WRITES = ("ZADD", "ZREM", "HSET", "HDEL", "DEL", "HINCRBY", "HINCRBYFLOAT", "SET", "INCR",
          "SADD", "SREM", "RPUSH", "RPOP", "LREM")
"""The commands delete-write removes: the core's and the lanes' (the paused set, the ring)."""
PROFILE = Profile("selftest", examples=400, steps=50, gate=False, sweep=True)
SHRINK_ALLOWANCE = 60.0  # seconds past the budget a difference found in time may take to shrink and replay


@dataclass(frozen=True)
class Mutant:
    """One edit of one line of one script. ``key`` names it stably across unrelated
    edits of the script: operator, script, the original line and which edit of it, and,
    for a line whose text occurs more than once in the script (``if bad then`` in
    lib.lua), which occurrence (``#2``: the second)."""

    operator: str
    script: str
    line: int
    before: str
    after: str
    nth: int = 0
    occurrence: int = 0

    @property
    def key(self) -> str:
        again = f"#{self.occurrence}" if self.occurrence else ""
        return f"{self.operator}|{self.script}|{self.before.strip()}|{self.nth}{again}"

    def apply(self, text: str) -> str:
        lines = text.split("\n")
        assert lines[self.line - 1] == self.before, f"{self.key}: the script changed"
        lines[self.line - 1] = self.after
        return "\n".join(lines)


def _code_lines(text: str) -> Iterator[tuple[int, str]]:
    """(number, line) of every line that is code, not a comment or blank."""
    for n, line in enumerate(text.split("\n"), 1):
        if line.strip() and not line.strip().startswith("--"):
            yield n, line


_CALL = re.compile(r'^\s*redis\.call\("(\w+)"')
_COMPARE = re.compile(r"<=|>=|(?<![<>~=])<(?!=)|(?<![<>~=-])>(?!=)")
_SWAP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}
_CONSTANT = re.compile(r'"[01]"|(?<![\w.])[01](?![\w.])')
_FLIP = {'"0"': '"1"', '"1"': '"0"', "0": "1", "1": "0"}
_GUARD = re.compile(r"^(\s*)if (.+) then\s*$")
_ZADD_KEY = re.compile(r'(redis\.call\("ZADD", k\.)(pending|active|schedule|dead)\b')
_STATE = re.compile(r', "state", emq\.states\.\w+')
_RANGE = re.compile(r'"-inf", (emq\.int\(a\.now\))')


def _outside_strings(line: str, match: re.Match[str]) -> bool:
    return line[: match.start()].count('"') % 2 == 0


def _comment_start(line: str) -> int:
    """Where the line's trailing ``--`` comment starts (outside strings), or its length:
    a mutant never edits a comment (it would be the same script)."""
    quoted = False
    for i, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        elif not quoted and line.startswith("--", i):
            return i
    return len(line)


def mutants_of(script: str, text: str, call_pattern: re.Pattern[str] = _CALL,
               writes: tuple[str, ...] = WRITES) -> list[Mutant]:
    """Every mutant of one script under the six operators of specs/selftest.md
    (``call_pattern`` finds a server call and its command in a line, ``writes`` names
    the commands delete-write removes: another layout's scripts call differently)."""
    out: list[Mutant] = []
    lines = text.split("\n")
    for n, line in _code_lines(text):
        code = _comment_start(line)
        call = call_pattern.match(line)
        if call and call.group(1) in writes:
            out.append(Mutant("delete-write", script, n, line, ""))
        for i, m in enumerate(m for m in _COMPARE.finditer(line, 0, code) if _outside_strings(line, m)):
            out.append(Mutant("swap-compare", script, n, line, line[: m.start()] + _SWAP[m.group()] + line[m.end():], i))
        for m in _RANGE.finditer(line, 0, code):  # a score range's inclusive upper bound is a <=
            out.append(Mutant("swap-compare", script, n, line, line[: m.start(1)] + '"(" .. ' + line[m.start(1):], 9))
        for i, m in enumerate(_CONSTANT.finditer(line, 0, code)):
            if m.group().startswith('"') or _outside_strings(line, m):
                out.append(Mutant("flip-constant", script, n, line, line[: m.start()] + _FLIP[m.group()] + line[m.end():], i))
        guard = _GUARD.match(line)
        if guard and n < len(lines) and lines[n].strip().startswith("return"):
            out.append(Mutant("drop-precondition", script, n, line, f"{guard.group(1)}if false then"))
        zadd = _ZADD_KEY.search(line)
        if zadd:
            to = spec.LOCATIONS[(spec.LOCATIONS.index(zadd.group(2)) + 1) % len(spec.LOCATIONS)]
            out.append(Mutant("misroute-zadd", script, n, line, line[: zadd.start(2)] + to + line[zadd.end(2):]))
        if call and call.group(1) == "HSET" and _STATE.search(line):
            dropped = _STATE.sub("", line, count=1)
            out.append(Mutant("drop-state-write", script, n, line, dropped if dropped.count(",") >= 3 else ""))
    unique: dict[str, Mutant] = {}
    for mutant in out:
        unique.setdefault(f"{mutant.line}\0{mutant.after}", mutant)  # two operators with one effect: one mutant
    counts = Counter(line.strip() for _, line in _code_lines(text))
    seen: Counter[str] = Counter()
    numbered: dict[int, int] = {}
    for n, line in _code_lines(text):
        if counts[line.strip()] > 1:
            seen[line.strip()] += 1
            numbered[n] = seen[line.strip()]
    return [replace(m, occurrence=numbered.get(m.line, 0)) for m in unique.values()]


SHARED = ("lib", "batch")
"""The shared parts of every transition script, mutated too: the live-attempt guard and
the pump live in lib.lua, the batch loop in batch.lua (specs/selftest.md)."""

LANE_SCRIPTS: tuple[str, ...] = tuple(dict.fromkeys(d.get("script", op) for op, d in spec.LANE_OPS.items()))
"""The lane ops' scripts (lane_enqueue, lane_claim, lane_config: lifecycle.md §10), mutated
like the core's: the machine's lane rules are what kills them."""


OBSERVER = ("snapshot",)
"""The read script the machine observes a real server through: mutated on a server only
(on the embedded fakeredis the snapshot is read from memory, emq_kit/check/memory.py, so
snapshot.lua never runs there and its mutants could not die)."""


def all_mutants(source: Path | None = None, *, observer: bool = False) -> list[Mutant]:
    """The mutants of every transition script, the lane scripts and the parts they share
    (lib.lua, batch.lua), with ``observer`` of snapshot.lua (a run on a server), then the
    ``edit-check`` ones (``check_mutants``); not of the other read scripts (counts,
    state): their answers are compared, not trusted."""
    node = source or resources.files("emq_live").joinpath("lua")
    out: list[Mutant] = []
    for op in spec.TRANSITIONS + LANE_SCRIPTS + SHARED + (OBSERVER if observer else ()):
        out.extend(mutants_of(op, node.joinpath(f"{op}.lua").read_text("utf-8")))
    return out + check_mutants(source)


CHECK_OPERATOR = "edit-check"


def check_mutants(source: Path | None = None) -> list[Mutant]:
    """The ``edit-check`` operator: each one-check edit of lib.lua or batch.lua
    (``raw.CHECK_EDITS``: an id bound, a queue byte bound, the KEYS and ARGV counts,
    the batch limit, the TIME arithmetic, the canonical-decimal test) as a mutant. Only
    raw calls reach these checks: the machine's raw-call rule and sweep kill them
    (``emq_kit/check/raw/rule.py``; tests/kit/test_rawcalls.py)."""
    from emq_kit.check.raw.edits import CHECK_EDITS

    node = source or resources.files("emq_live").joinpath("lua")
    out = []
    for nth, edit in enumerate(CHECK_EDITS):
        text = node.joinpath(f"{edit.script}.lua").read_text("utf-8")
        lines = [(n, line) for n, line in _code_lines(text) if edit.before in line]
        if len(lines) != 1 or lines[0][1].count(edit.before) != 1:
            raise ValueError(f"{edit.name}: {edit.before!r} must be in exactly one line of {edit.script}.lua")
        n, line = lines[0]
        out.append(Mutant(CHECK_OPERATOR, edit.script, n, line, line.replace(edit.before, edit.after), nth))
    return out


def equivalents() -> dict[str, str]:
    """Mutants shown equivalent to the original: key -> the reason."""
    data = json.loads(resources.files("emq_kit.selftest").joinpath("equivalent_mutants.json").read_text("utf-8"))
    return {e["key"]: e["reason"] for e in data["equivalent"]}


@dataclass
class MutantVerdict:
    """What the machine did to one mutant."""

    mutant: Mutant
    status: str  # killed, survived, equivalent, UNJUDGED; ERROR: the environment failed, BUG: the kit did (never reported)
    seconds: float  # to the first divergence when killed, else the time spent
    examples: int  # whole examples run against the mutant; -1 when unknown (a kill its watch made)
    shrunk: int = 0
    rule: str = ""
    reason: str = ""
    shrink_seconds: float | None = None  # from the first divergence to the shrunk trace, when the machine shrank one


def copy_scripts(into: str | Path, script: str, edit: Callable[[str], str], source: Path | None = None) -> Path:
    """A copy of every ``.lua`` of ``source`` (our scripts by default) in ``into``, with
    ``edit`` applied to ``<script>.lua``: how a mutant, or a hand-broken variant, is made."""
    src = source or resources.files("emq_live").joinpath("lua")
    for entry in src.iterdir():
        if entry.name.endswith(".lua"):
            text = entry.read_text("utf-8")
            Path(into, entry.name).write_text(edit(text) if entry.name == f"{script}.lua" else text, "utf-8")
    return Path(into)


def _check(mutant: Mutant, url: str | None, seed: int, source: Path | None, started: float, tmp: str,
           found: Any = None, layout: Layout | None = None, names: Names | None = None,
           unreplayed: Any = None, ran: Any = None) -> MutantVerdict:
    """The machine against one mutant, to the end (in a child process of ``judge``), its
    scripts written into the empty directory ``tmp`` (the parent's: a child killed for
    its budget cleans up nothing). Runs of ``seed``, then of the next seeds while every
    difference a run met failed to replay (specs/selftest.md): ``found`` (a shared
    double) gets the time of the first divergence as soon as the next example starts,
    back to 0 when that run's differences did not replay; ``unreplayed`` (a shared int)
    the count of differences met that no replay showed; ``ran`` (a shared int) the
    examples started so far, the one running included."""
    def note(run: Any) -> None:
        if found is not None and run.first_failure is not None and not found.value:
            found.value = run.first_failure
        if ran is not None:
            ran.value = examples + run.examples

    copy_scripts(tmp, mutant.script, mutant.apply, source)
    try:
        target = (layout or layout_named()).open_target(url, tmp, observe=False, names=names)
    except ServerUnreachable as exc:  # the environment: no verdict on the mutant
        return MutantVerdict(mutant, ERROR, time.perf_counter() - started, 0, reason=str(exc))
    except Exception as exc:  # noqa: BLE001 - a mutant that does not even load is dead
        return MutantVerdict(mutant, "killed", time.perf_counter() - started, 0, 0, "load", str(exc).splitlines()[0])
    examples, missed, attempt, profile = 0, 0, seed, PROFILE
    try:
        while True:
            # A mutant is killed by its first difference: collecting every one (the
            # default) would hold the verdict until the whole budget of examples ran.
            report = run_check(target, profile, seed=attempt, progress=note, layout=layout, focus=Focus(report=False))
            examples += report.examples
            if report.divergence is not None or not report.unreproduced:
                break
            # A difference no replay showed is no kill, and no survival either
            # (specs/selftest.md, Scope and budget): search on from the next seed in the budget.
            missed += len(report.unreproduced)
            if unreplayed is not None:
                unreplayed.value = missed
            if found is not None:
                found.value = 0.0
            attempt, profile = (attempt + 1) % 2**64, replace(PROFILE, sweep=False)  # the sweep is seed-free: done
    except (ConnectionError,) + _lost() as exc:  # the server went away: no verdict on the mutant
        return MutantVerdict(mutant, ERROR, time.perf_counter() - started, 0, reason=f"lost the server: {exc}")
    except _script_error() as exc:  # a mutated script the kit reads through (snapshot.lua) failed: dead
        return MutantVerdict(mutant, "killed", time.perf_counter() - started, 0, 0, SCRIPT_ERROR,
                             " ".join(str(exc).split())[:160])
    except Exception as exc:  # noqa: BLE001 - the kit's own failure: no verdict on the mutant
        return MutantVerdict(mutant, BUG, time.perf_counter() - started, 0, reason=f"{type(exc).__name__}: {exc}")
    finally:
        target.close()
    after = f"at seed {attempt}, after {missed} difference(s) no replay showed" if missed else ""
    if report.divergence is None:
        return MutantVerdict(mutant, "survived", time.perf_counter() - started, examples, reason=after)
    shrink = time.perf_counter() - report.first_failure if report.first_failure is not None else None
    return MutantVerdict(mutant, "killed", (report.first_failure or started) - started, examples,
                         len(report.shrunk), report.divergence.rule, reason=after, shrink_seconds=shrink)


ERROR = "error"
"""The status of a mutant whose server failed: no verdict (``require_verdict`` stops the run)."""
BUG = "bug"
"""The status of a mutant whose check failed in the kit's own code, or whose check
process died: no verdict, the run stops (``emq bug``)."""


UNJUDGED = "unjudged"
"""The status of a mutant whose budget was spent before one whole example ran against
it: neither killed nor survived, counted apart (specs/selftest.md, Verdicts)."""


UNREPLAYED = "unreplayed"
"""The status of a mutant whose budget (and the allowance past it) was spent with
differences met and none shown again by a replay: no verdict, the run stops
(``SearchFailed``)."""


SCRIPT_ERROR = "script error"
"""The rule of a mutant killed because a script the kit reads through raised an error."""


def _script_error() -> type[Exception]:
    import redis

    return redis.exceptions.ResponseError


def _lost() -> tuple[type[Exception], ...]:
    import redis

    return (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def judge(mutant: Mutant, url: str | None, budget: float, seed: int, source: Path | None = None,
          layout: Layout | None = None, names: Names | None = None) -> MutantVerdict:
    """Check one mutant with the machine within ``budget`` seconds of searching. The
    check runs in a forked child, so a spent budget can stop it anywhere (Hypothesis
    cannot be interrupted cleanly from inside); once a divergence is found, shrinking
    may take up to ``SHRINK_ALLOWANCE`` more. On a server the run's queues go under
    ``names`` (the run's claim, emq_kit.claim): a child killed for its budget leaves its
    keys under them, and the next mutant's queues, or the claim's end, delete them."""
    # The mutant's scripts: a directory of the parent's, removed once the child is gone
    # (a child killed for its budget or a hang removes nothing of its own).
    with tempfile.TemporaryDirectory(prefix="emq-mutant-") as tmp:
        return _judged(mutant, url, budget, seed, source, layout, tmp, names)


def _judged(mutant: Mutant, url: str | None, budget: float, seed: int, source: Path | None,
            layout: Layout | None, tmp: str, names: Names | None = None) -> MutantVerdict:
    """``judge``, the mutant's scripts written into ``tmp``."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    found = ctx.Value("d", 0.0)  # perf_counter() is CLOCK_MONOTONIC: one clock across the fork
    unreplayed = ctx.Value("i", 0)
    ran = ctx.Value("i", 0)  # examples the child started, the one running included
    # when the child's command now running was sent (0: none): the child's CPU time on
    # fakeredis, perf_counter() on a server (the bound each is kept on, CC-9)
    calling = ctx.Value("d", 0.0)
    started = time.perf_counter()

    parent_pid = os.getpid()

    def work() -> None:
        die_with_parent(parent_pid)  # a SIGKILLed selftest leaves no mutant running (INT-2)
        _time_commands(calling, time.process_time if url is None else time.perf_counter)
        # On a server the judge stops a hung script itself (its watch of the call in
        # flight, or the spent budget): a bound of the child's own would race it (CC-9's
        # hang is the same kill). On fakeredis the judge's watch of the child's CPU
        # (HANG_AFTER) comes first; the runtime's own bound, twice that, stops a hang met
        # once the watch is off (shrinking)
        hang.SERVER_SECONDS = 0.0
        embedded.CPU_SECONDS = 2 * HANG_AFTER
        child.send(_check(mutant, url, seed, source, started, tmp, found, layout, names, unreplayed, ran))

    proc = ctx.Process(target=work, daemon=True)
    try:
        with interrupts_deferred():  # a Ctrl-C during the fork would be lost in an at-fork handler
            proc.start()
    except KeyboardInterrupt:  # raised once the child exists: it goes with it
        if proc.pid is not None:
            proc.kill()
            proc.join()
        raise
    child.close()

    # A command that does not return is a script that never returns (CC-9), and ends the
    # wait at once, not when the budget is spent. On fakeredis the script runs in the
    # child: past HANG_AFTER seconds of the child's CPU (a command still in flight when
    # the budget runs out is given the rest of them). On a server: past SERVER_SECONDS,
    # as the check's own bound (hang.py), once SCRIPT KILL stopped a script.
    asked: set[float] = set()  # the server's commands past the bound with no script running
    stopped = False  # the watch stopped the script of a server's command in flight

    def hung() -> bool:
        nonlocal stopped
        if found.value:
            return False
        if url is None:
            return _past_bound(proc.pid, calling.value)
        stopped = _stopped_past(url, proc.pid, calling.value, asked)
        return stopped

    try:
        if _answered(parent, started + budget, hung) or (found.value and parent.poll(SHRINK_ALLOWANCE)):
            # the child's end may be the group's SIGTERM (a CI job's limit), noted here by
            # now: the run's interrupt, never "the check process died" (INT-2)
            interrupts.check()
            verdict: MutantVerdict = parent.recv()
        elif found.value:  # a difference met, neither shrunk nor replayed in time: no kill earned
            verdict = MutantVerdict(mutant, UNREPLAYED, found.value - started, -1,
                                    reason=f"a difference met at {found.value - started:.1f} s was not shrunk and "
                                           f"replayed within {SHRINK_ALLOWANCE:g} s past the budget of {budget:g} s")
        elif stopped:
            verdict = MutantVerdict(mutant, "killed", time.perf_counter() - started, -1, 0, HANG,
                                    f"a call had not returned after {hang.SERVER_SECONDS:g} s "
                                    "(its script stopped with SCRIPT KILL)")
        elif url is None and _never_returns(proc.pid, calling):
            verdict = MutantVerdict(mutant, "killed", time.perf_counter() - started, -1, 0, HANG,
                                    f"a script had not returned after {HANG_AFTER:g} s of CPU")
        elif unreplayed.value:
            verdict = MutantVerdict(mutant, UNREPLAYED, time.perf_counter() - started, -1,
                                    reason=f"{unreplayed.value} difference(s) met in the budget of {budget:g} s, "
                                           "none shown again by a replay")
        elif (whole := ran.value - 1) < 1:  # a survivor is one the search ran whole examples against
            verdict = MutantVerdict(mutant, UNJUDGED, time.perf_counter() - started, 0,
                                    reason=f"budget of {budget:g} s spent before an example ran whole")
        else:
            verdict = MutantVerdict(mutant, "survived", time.perf_counter() - started, whole,
                                    reason=f"budget of {budget:g} s spent after {whole} examples")
    except EOFError:  # no verdict was sent: the kit's run died, not the mutant's doing
        verdict = MutantVerdict(mutant, BUG, time.perf_counter() - started, -1, reason="the check process died")
    except KeyboardInterrupt:  # the child goes, then a script of its still running on the server
        proc.kill()  # first: alive, it sends its next call, which hangs again (INT-2: a second or two)
        proc.join()
        if url is not None:
            with contextlib.suppress(KitError):
                stop_script(url)
        raise
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        parent.close()
    if verdict.status == BUG and proc.exitcode:
        verdict.reason += f" (exit code {proc.exitcode})"
    # A mutant whose script never returns (a SCAN loop that never ends) blocks its server,
    # and the child's death does not stop it: stop it, or every later mutant would fail on
    # BUSY. A script still running after the budget, or when the check died (on BUSY), is
    # the mutant's fault: killed.
    if url is not None and stop_script(url) and verdict.status in ("survived", UNJUDGED, UNREPLAYED, BUG):
        return MutantVerdict(mutant, "killed", time.perf_counter() - started, -1, 0, HANG,
                             "a script was still running when the budget was spent (stopped with SCRIPT KILL)")
    return verdict


def _answered(parent: Any, until: float, hung: Callable[[], bool]) -> bool:
    """Whether the child has answered by ``until`` (``perf_counter`` time); the wait ends
    early, unanswered, once ``hung()``: a script that never returns need not hold the
    run for the whole budget."""
    while (left := until - time.perf_counter()) > 0:
        interrupts.check()  # the wait for a mutant's verdict is a stopping point (INT-2)
        if parent.poll(min(left, 1.0)):
            return True
        if hung():
            return False
    return bool(parent.poll(0))


def _never_returns(pid: int | None, calling: Any) -> bool:
    """Whether the child ``pid``'s command in flight (``calling``: the child's CPU time
    when it was sent, 0 for none) goes on past ``HANG_AFTER`` seconds of its CPU, waited
    for as long as the child runs: however loaded the machine, a script that never
    returns gets there. A child whose CPU stands still for ``HANG_AFTER`` seconds is not
    running a script (a script runs on its CPU): no hang."""
    sent = calling.value
    last, since = None, time.perf_counter()
    while sent and calling.value == sent:
        used = cpu_seconds(pid) if pid is not None else None
        if used is None:  # the child is gone, or its clock cannot be read here
            return False
        if used - sent > HANG_AFTER:
            return calling.value == sent
        if used != last:
            last, since = used, time.perf_counter()
        elif time.perf_counter() - since > HANG_AFTER:
            return False
        time.sleep(0.05)
    return False


def _stopped_past(url: str, pid: int | None, sent: float, asked: set[float]) -> bool:
    """Whether the child ``pid``'s command in flight on the server ``url`` since ``sent``
    (``perf_counter`` time; 0: none) has run past ``hang.SERVER_SECONDS`` and ``SCRIPT
    KILL`` then stopped a script: the server's hang (CC-9), found as the check's own bound
    finds it (``hang.stopped``); the child is left paused, to be killed. Each command is
    asked about once (``asked``): one past the bound with no script running is a slow
    server, not a hang, and the child goes on. A script that has written cannot be
    stopped: ``Unkillable``, the run stops."""
    if pid is None or not sent or sent in asked or time.perf_counter() - sent <= hang.SERVER_SECONDS:
        return False
    asked.add(sent)
    # Paused, the child sends nothing more: its next call, on the error the kill answers,
    # would hang the server again (a snapshot.lua mutant's every call does).
    os.kill(pid, signal.SIGSTOP)
    found = False
    try:
        found = stop_script(url)
    finally:
        if not found:
            os.kill(pid, signal.SIGCONT)
    return found


def _past_bound(pid: int | None, sent: float) -> bool:
    """Whether the child ``pid`` has used more than ``HANG_AFTER`` seconds of CPU since
    its command in flight was sent at ``sent`` of its CPU time (0: none in flight). CPU,
    not wall time (CC-9): on a loaded machine, or beside other children on few cores, a
    large call takes several times its CPU in wall time and is no hang."""
    used = cpu_seconds(pid) if pid is not None and sent else None
    return used is not None and used - sent > HANG_AFTER


HANG = hang.RULE
"""The rule of a mutant killed because one of its scripts never returned (CC-9)."""
HANG_AFTER = embedded.CPU_SECONDS
"""Seconds of the child's CPU one command may use before it counts as a script that
never returns: the embedded fakeredis's bound (``emq_live.embedded.CPU_SECONDS``, CC-9),
kept by the judge from outside the child, which stops it at once (the runtime's own stop
would have the child shrink a hang, waiting out the bound at each replay)."""


def _time_commands(calling: Any, clock: Callable[[], float]) -> None:
    """In ``judge``'s child only: every command the child sends notes when it was sent,
    by ``clock`` (the child's CPU time on fakeredis, ``perf_counter`` on a server), in
    ``calling`` (0 once it returned), so the parent can tell a hung script from a slow
    search."""
    import redis
    from redis.cluster import RedisCluster

    # A cluster client sends through its own path (to the node of the key's slot), not
    # redis.Redis's: both are watched, or a cluster's hang would wait out the budget (CC-9).
    for client in (redis.Redis, RedisCluster):
        client.execute_command = _timing(client.execute_command, calling, clock)  # type: ignore[method-assign]


def _timing(send: Callable[..., Any], calling: Any, clock: Callable[[], float]) -> Callable[..., Any]:
    """``send`` (a client's ``execute_command``) noting in ``calling`` when each command
    was sent, by ``clock``, and 0 once it returned."""

    def timed(self: Any, *args: Any, **options: Any) -> Any:
        calling.value = clock()
        try:
            return send(self, *args, **options)
        finally:
            calling.value = 0.0

    return timed



def chosen_mutants(url: str | None, only: str | None = None, names: Names | None = None, *, seed: int = 0,
                   sample: int | None = None) -> list[Mutant]:
    """The mutants a selftest judges (those whose key contains ``only``, if given;
    snapshot.lua's on a server only; then ``sampled``), once the unmutated scripts are
    seen to load there: a server out of reach or ``only`` matching no mutant is a
    ``KitError``."""
    chosen = [m for m in all_mutants(observer=url is not None) if not only or only in m.key]
    if not chosen:
        raise BadArgument(f"--only {only!r} matches no mutant (emq selftest --list shows them)")
    layout_named().open_target(url, None, observe=False, names=names).close()  # the unmutated scripts: ServerUnreachable
    return sampled(chosen, seed, sample)


def sampled(chosen: list[Mutant], seed: int, sample: int | None) -> list[Mutant]:
    """A sample of ``sample`` of ``chosen`` drawn with ``seed``, in their order (all of
    them when ``sample`` is None or not fewer): the same for a serial run and a cluster's."""
    if sample is None or sample >= len(chosen):
        return chosen
    picked = set(random.Random(seed).sample(range(len(chosen)), sample))
    return [m for i, m in enumerate(chosen) if i in picked]


def settled(v: MutantVerdict, known: dict[str, str]) -> MutantVerdict:
    """``v`` with a survivor shown equivalent (``equivalents()``) marked so."""
    if v.status == "survived" and v.mutant.key in known:
        v.status, v.reason = "equivalent", known[v.mutant.key]
    return v


def run_selftest(url: str | None, budget: float, seed: int, only: str | None = None,
                 report: Callable[[MutantVerdict], None] | None = None,
                 started: Callable[[int, int, Mutant], None] | None = None,
                 names: Names | None = None, sample: int | None = None) -> list[MutantVerdict]:
    """Judge every mutant ``chosen_mutants`` gives, one after another. A mutant is
    killed only by a counterexample (or scripts that do not load): a server that cannot
    be reached, before or during the run, is a ``KitError`` (``started`` is called with
    k and n before mutant k of n). On a server the queues go under ``names``, the run's
    (emq_kit.claim)."""
    known = equivalents()
    chosen = chosen_mutants(url, only, names, seed=seed, sample=sample)
    verdicts = []
    for k, mutant in enumerate(chosen, 1):
        if started:
            started(k, len(chosen), mutant)
        v = settled(require_verdict(judge(mutant, url, budget, seed, names=names), k, len(chosen)), known)
        verdicts.append(v)
        if report:
            report(v)
    return verdicts


def require_verdict(v: MutantVerdict, k: int, n: int) -> MutantVerdict:
    """``v``, the ``k``-th of ``n``, when the machine gave one; a mutant the environment
    (``error``), the kit (``BUG``) or differences no replay showed (``UNREPLAYED``)
    left without one stops the run, never "survived"."""
    where = f"mutant {k} of {n} ({v.mutant.key})"
    if v.status == ERROR:
        raise ServerUnreachable(f"{where}: {v.reason}")
    if v.status == BUG:
        raise KitBug(CheckFailed(v.reason), where=where)
    if v.status == UNREPLAYED:
        raise SearchFailed(f"{where}: {v.reason}: no verdict")
    return v


def summary(verdicts: list[MutantVerdict], of: int | None = None, part: str = "") -> dict[str, Any]:
    """Killed over the non-equivalent mutants, median time-to-kill and shrunk length;
    ``of`` the mutants of the scripts (default: those judged) and ``part`` why only
    some were judged (kept only when fewer were: specs/selftest.md, Verdicts)."""
    killed = [v for v in verdicts if v.status == "killed"]
    shrunk = [v.shrunk for v in killed if v.shrunk > 0]  # -1, 0: killed without a shrunk trace
    shrinks = [v.shrink_seconds for v in killed if v.shrink_seconds is not None]
    of = len(verdicts) if of is None else of
    return {
        "mutants": len(verdicts),
        "of": of,
        "part": part if len(verdicts) < of else "",
        "killed": len(killed),
        "equivalent": sum(v.status == "equivalent" for v in verdicts),
        "survived": sum(v.status == "survived" for v in verdicts),
        "unjudged": sum(v.status == UNJUDGED for v in verdicts),
        "median_seconds_to_kill": round(statistics.median(v.seconds for v in killed), 3) if killed else None,
        "median_shrunk_steps": statistics.median(shrunk) if shrunk else None,
        "median_shrink_seconds": round(statistics.median(shrinks), 3) if shrinks else None,
        "max_shrink_seconds": round(max(shrinks), 3) if shrinks else None,
    }
