"""One progress facility for every long command (emq_kit/cli/progress.py): off a terminal
plain lines only (a phase change, then at most one every 10 s; never a carriage return),
on a terminal one live line; a count never past its total; an ETA where the total is
known; a check's phases as its run goes through them."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

from emq_kit import cli
from emq_kit.check.tally import Run
from emq_kit.cli.progress import CheckProgress, Meter


class Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_a_line_per_phase_and_every_ten_seconds_never_a_carriage_return() -> None:
    now = [0.0]
    out = Pipe()
    meter = Meter("audit", out, clock=lambda: now[0])
    for t, done in ((0.0, 0), (1.0, 10), (5.0, 50), (10.5, 105), (12.0, 120)):
        now[0] = t
        meter.show("keys", done, 200)
    now[0] = 13.0
    meter.show("pending", 1)
    meter.end()
    assert out.getvalue().splitlines() == ["emq audit: keys  0/200 (0%)", "emq audit: keys  105/200 (52%), ETA 10s",
                                           "emq audit: pending  1"]
    assert "\r" not in out.getvalue()


def test_a_count_never_passes_its_total() -> None:
    out = Pipe()
    Meter("check", out).show("searching", 662, 200)
    assert out.getvalue() == "emq check: searching  200/200 (100%)\n"


def test_on_a_terminal_one_live_line_ended_before_what_follows() -> None:
    out = Terminal()
    meter = Meter("bench", out)
    meter.show("the model, a longer phase name")
    meter.show("lanes")
    assert out.getvalue().startswith("\r  the model") and "\n" not in out.getvalue()
    assert out.getvalue().endswith("\r  lanes" + " " * (len("the model, a longer phase name") - len("lanes")))
    meter.end()
    assert out.getvalue().endswith("\n")


def test_a_checks_phases_and_examples_searched_against_its_budget() -> None:
    out = Pipe()
    show = CheckProgress(30, out)
    run = Run(budget=30)
    show(run)
    run.searched, run.shrinking = 12, True
    show(run)
    run.phase, run.shrinking = "minimizing", False
    show(run)
    lines = out.getvalue().splitlines()
    assert [line.split("  ")[0] for line in lines] == ["emq check: searching", "emq check: shrinking a difference",
                                                       "emq check: minimizing"]
    assert "0/30 (0%)" in lines[0] and "12/30 (40%)" in lines[1] and "/30" not in lines[2]


def test_a_real_check_says_each_phase_in_order_off_a_terminal(tmp_path: Path) -> None:
    """A dev run on the foreign port: searching, shrinking a difference, minimizing,
    reproducing — in that order, every count within its total, no carriage return."""
    foreign = f"{sys.executable} {Path(__file__).parents[1] / 'drivers' / 'foreign.py'}"
    done = subprocess.run([str(Path(sys.executable).with_name("emq")), "check", "--driver", foreign, "--profile", "dev",
                           "--seed", "3", "--traces", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("emq check: ")]
    phases = [line.split("  ")[0].removeprefix("emq check: ") for line in lines]
    firsts = list(dict.fromkeys(phases))
    assert firsts[:2] == ["searching", "shrinking a difference"] and firsts[-2:] == ["minimizing", "reproducing"]
    for line in lines:
        if "/" in line.split("  ")[1]:
            done_, total = line.split("  ")[1].split(" ")[0].split("/")
            assert int(done_.replace(",", "")) <= int(total.replace(",", ""))
    assert "\r" not in done.stderr


def test_a_runs_progress_counts_the_cells_its_summary_counts(capsys) -> None:
    """A deep run leaves claim/empty out of its cells (DEPTH-2): its progress lines count
    over the same cells as its summary."""
    assert cli.main(["check", "--profile", "dev", "--seed", "1", "--depth", "20"]) == cli.EXIT_OK
    out, err = capsys.readouterr()
    summary = re.search(r"^  cells (\d+)/(\d+) \(op", out, re.M)
    shown = re.findall(r"^emq check: .*  cells (\d+)/(\d+)$", err, re.M)
    assert summary and "claim/empty" in out
    assert shown and {total for _, total in shown} == {summary.group(2)}
    assert int(shown[-1][0]) <= int(summary.group(1))


def test_emq_version_names_the_kit_and_its_contract() -> None:
    done = subprocess.run([str(Path(sys.executable).with_name("emq")), "--version"], capture_output=True, text=True,
                          timeout=60)
    from emq_kit.report.document import kit_version
    from emq_model import spec

    assert done.returncode == 0
    assert done.stdout == f"emq {kit_version()} (spec {spec.SPEC_VERSION}, wire {spec.WIRE_VERSION})\n"
