"""Ctrl-C and SIGTERM where the run stands (specs/safety.md INT-1): raised at the next
step, never lost in a callback, and what an interrupt raised mid-call breaks is its own."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import emq_kit
from emq_kit import interrupts
from emq_kit.check.base import Machine
from emq_kit.check.live import LiveTarget
from emq_kit.errors import Interrupted
from emq_kit.server import ServerProcess
from tests.livekit import DB, J, flush_url


@pytest.fixture
def stopping(ctrl_c: None) -> Iterator[Any]:
    """The CLI's ``stopping()`` around the test, its interrupt handled at the end."""
    with interrupts.stopping() as stop:
        yield stop
        interrupts.handled()


@pytest.mark.parametrize("options, noted_at", [
    ({"profile": "thorough", "examples": 1, "steps": 5}, 40),  # in the raw sweep
    ({"profile": "dev", "examples": 1, "steps": 5, "depth": 2000}, 3),  # in the fill (500 jobs a step)
], ids=["the raw sweep", "a deep fill"])
def test_an_interrupt_is_raised_at_the_next_step(options: dict[str, Any], noted_at: int, stopping: Any,
                                                 monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A deep fill and the raw sweep make hundreds of steps between two example starts:
    an interrupt noted during them is raised at the next step, not a ``GRACE`` later
    where the run happens to stand (a pipeline half read, a reply left unread)."""
    monkeypatch.setattr(interrupts, "GRACE", 600.0)  # never raised where it stands: at a stopping point or not at all
    record, made = Machine._record, [0]

    def counted(self: Machine, queue: str, op: str, args: dict[str, Any]) -> Any:
        made[0] += 1
        step = record(self, queue, op, args)
        if made[0] == noted_at:
            signal.raise_signal(signal.SIGTERM)
        return step

    monkeypatch.setattr(Machine, "_record", counted)
    with pytest.raises(Interrupted):
        emq_kit.check(seed=5, traces=str(tmp_path), say=lambda line: None, **options)
    assert stopping.noted == 1 and not stopping.stood
    assert made[0] <= noted_at + 1, f"the interrupt noted at step {noted_at} was raised at step {made[0]}"


def test_an_interrupt_lost_in_a_callback_is_not_printed_and_comes_again(stopping: Any, monkeypatch: pytest.MonkeyPatch,
                                                                       capfd: pytest.CaptureFixture[str]) -> None:
    """Raised where the run stands, the interrupt may land in a gc callback (Hypothesis
    has one), which the interpreter only reports: nothing is printed, and it is raised
    again a ``GRACE`` later."""
    monkeypatch.setattr(interrupts, "GRACE", 0.5)
    signal.raise_signal(signal.SIGINT)  # noted
    landed: list[bool] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and not landed:
            landed.append(True)
            signal.raise_signal(signal.SIGINT)  # a second one: raised at once, in the callback

    gc.callbacks.append(callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(callback)
    assert landed and stopping.stood
    with pytest.raises(Interrupted):
        threading.Event().wait(20)  # no stopping point here: only the watcher's raise ends the wait
    assert "Exception ignored" not in capfd.readouterr().err


def test_an_error_past_an_interrupt_raised_where_the_run_stood_is_the_interrupts(stopping: Any) -> None:
    """INT-1: what the run meets once the interrupt cut a call short is the interrupt's:
    never a kit bug, a lost server or a verdict; before that, an error is itself."""
    with pytest.raises(RuntimeError), interrupts.blamed():
        raise RuntimeError("the kit's own")
    signal.raise_signal(signal.SIGINT)
    with pytest.raises(Interrupted):
        signal.raise_signal(signal.SIGINT)  # a second one: raised where the run stands
    assert interrupts.stood()
    with pytest.raises(Interrupted) as raised, interrupts.blamed():
        raise AssertionError("a reply read as another command's")
    assert isinstance(raised.value.__cause__, AssertionError)


def test_the_cleanup_after_an_interrupt_where_the_run_stood_reads_fresh_replies(valkey: ServerProcess,
                                                                                 stopping: Any) -> None:
    """A pipeline cut short hands its connection back with replies still to come; the
    target's close after such an interrupt opens fresh connections, so its wipe of the
    run's queues reads its own replies and leaves no key."""
    target = LiveTarget(flush_url(valkey))
    target.queue("alpha").enqueue(J(1), b"x")
    r = target.conn.redis
    conn = r.connection_pool.get_connection()
    conn.send_command("BLPOP", "emq:{alpha}:nothing", "0.5")  # its reply comes once the connection is back
    r.connection_pool.release(conn)  # as redis-py's pipeline does when interrupted mid-read
    stopping.stood = True  # the interrupt was raised where the run stood
    target.close()
    with valkey.client(db=DB) as fresh:
        assert [k for k in fresh.scan_iter() if not k.startswith(b"{emq}")] == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_the_process_exits_leaves_the_verdicts_code(signum: int, tmp_path: Path) -> None:
    """INT-3: once a command has its verdict only SIGKILL ends it; one sent while the
    interpreter winds down (its exit handlers, here) neither kills the process (SIGTERM's
    default came back with the command's end) nor prints a traceback."""
    program = (f"import atexit, os, sys\n"
               f"from emq_kit.cli import main\n"
               f"atexit.register(lambda: os.kill(os.getpid(), {int(signum)}))\n"
               f"sys.argv = ['emq', 'check', '--profile', 'dev', '--seed', '1', '--examples', '3', '--steps', '5',\n"
               f"            '--traces', {str(tmp_path)!r}]\n"
               f"sys.exit(main())\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done
    assert "INCONCLUSIVE" in done.stdout or "CONFORMS" in done.stdout, done.stdout


def test_a_second_interrupt_during_the_first_ones_ending_says_the_seed_once(stopping: Any, monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    """INT-1: a second Ctrl-C (or SIGTERM) raised while the run keeps its steps so far
    ends it at once, and its seed is said once, not again by the outer handler."""
    from emq_kit import api

    keep = api._keep_interrupted

    def second(*args: Any) -> None:
        signal.raise_signal(signal.SIGINT)  # the second: raised here, at once
        keep(*args)

    monkeypatch.setattr(api, "_keep_interrupted", second)
    said: list[str] = []

    def progress(run: Any) -> None:
        if run.examples == 2:
            signal.raise_signal(signal.SIGINT)  # the first: noted, raised at the next step

    with pytest.raises(Interrupted):
        emq_kit.check(profile="dev", seed=3, examples=5, traces=str(tmp_path), say=said.append, progress=progress)
    assert stopping.noted == 2
    assert [line for line in said if line.startswith("interrupted")] == [
        f"interrupted; seed 3 (run it again: emq check --seed 3 --profile dev --examples 5 --traces {tmp_path})"], said


def test_an_interrupt_at_the_releases_start_waits_for_the_release(valkey: ServerProcess, ctrl_c: None) -> None:
    """OWN-5: a Ctrl-C that lands as the claim's release begins (it stops the renewal
    first) is acted on once the run's keys, record and fence are deleted; raised there,
    it left them on the server."""
    from emq_kit.claim import Claim

    url = flush_url(valkey)
    with valkey.client(db=DB) as r:
        before = set(r.scan_iter())
        claim = Claim(url, ("alpha",), command="emq check", say=lambda line: None)
        names = claim.__enter__()
        r.set(names.key(b"emq:{alpha}:pending"), "the run's")

        stop = claim._stop.set

        def interrupting() -> None:
            signal.raise_signal(signal.SIGINT)  # Python's own handler: raised right here unless deferred
            stop()

        claim._stop.set = interrupting  # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            claim.release()
        assert set(r.scan_iter()) == before


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_the_commands_modules_load_ends_it_at_its_start(signum: int, tmp_path: Path) -> None:
    """INT-1: one that comes before the command began (its modules loading as its line
    is parsed) is noted, and the command ends at its start: one line, exit 130, nothing
    run. Python's defaults raised it inside an import (a traceback, exit 1) or killed the
    process (SIGTERM)."""
    program = (f"import signal, sys\n"
               f"import emq_kit.cli as cli\n"
               f"parser = cli.parser\n"
               f"def loading(command):\n"
               f"    signal.raise_signal({int(signum)})\n"
               f"    return parser(command)\n"
               f"cli.parser = loading\n"
               f"sys.argv = ['emq', 'check', '--profile', 'dev', '--seed', '1', '--traces', {str(tmp_path)!r}]\n"
               f"sys.exit(cli.main())\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "emq check: interrupted\n"), done
    assert list(tmp_path.iterdir()) == []
