"""The hostile catalogue: the kit harms nothing it does not own.

One test per item of specs/ownership.md (and of the rules beside it), each on fakeredis,
Valkey and through a driver where the item applies. Sections, each its own: ownership
(OWN-*), bounds (BD-*), outputs first (OUT-*).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from emq_kit import bounds, cli
from emq_kit.server import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``emq ARGV`` in this process: its exit code (argparse's too), stdout, stderr."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own refusals
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def private() -> Iterator[ServerProcess]:
    """A Valkey of this module's own: what a command leaves on it is all there is."""
    with ServerProcess() as server:
        yield server


@pytest.fixture
def empty(private: ServerProcess) -> Iterator[ServerProcess]:
    with private.client() as r:
        r.flushall()
    yield private


# -- bounds (BD-1) -------------------------------------------------------------------------


def _argv(option: str, value: str) -> list[str]:
    command, flag = option.split()
    return [command, *(["redis://127.0.0.1:1"] if command == "audit" else []), flag, value]


def _above(b: bounds.Bound) -> str:
    return str(b.high + 1) if b.kind == "integer" else repr(float(b.high) * 2)


@pytest.mark.parametrize("option", [o for o in bounds.BOUNDS if not o.startswith("pytest ")])
def test_every_numeric_option_has_a_documented_upper_bound_refused_in_one_line(
        option: str, capsys: pytest.CaptureFixture[str]) -> None:
    """BD-1: each numeric option's ``--help`` prints its range, and one above the upper
    bound (10^23 examples too) is refused in one line, exit 2, before any work; the bound
    itself is accepted. README's table gives the same ranges."""
    b = bounds.bound(option)
    command, flag = option.split()
    code, out, err = run([command, "--help"], capsys)
    assert code == 0 and b.text() in " ".join(out.split()), f"{option}: {b.text()} not in --help"
    for value in (_above(b), *(["10" + "0" * 23] if b.kind == "integer" else ["inf", "nan"])):
        code, out, err = run(_argv(option, value), capsys)
        assert code == cli.EXIT_ENV and out == "", (option, value, out)
        assert f"argument {flag}: must be" in one_line(err), err
    parser = cli.parser()
    at = str(int(b.high)) if b.kind == "integer" else str(b.high)
    namespace = parser.parse_args(_argv(option, at))
    assert getattr(namespace, flag[2:].replace("-", "_")) in (b.high, (b.high,))
    readme = (ROOT / "README.md").read_text("utf-8")
    assert f"| `emq {option}` | {b.text()} |" in readme, f"README's bounds table lacks {option}"


def test_the_pytest_plugins_seed_is_bounded_too(tmp_path: Path) -> None:
    """BD-1 for ``pytest --emq-seed``: pytest's own parser refuses it, exit 4 (usage)."""
    b = bounds.bound("pytest --emq-seed")
    done = subprocess.run([sys.executable, "-m", "pytest", "--emq", "--emq-seed",
                           str(b.high + 1), "--co", "-q", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=60)
    assert done.returncode == 4 and "must be at most" in done.stderr, done.stdout + done.stderr
    readme = (ROOT / "README.md").read_text("utf-8")
    assert f"| `pytest --emq-seed` | {b.text()} |" in readme


# -- outputs first (OUT-1) --------------------------------------------------------------------

BAD_PATHS = ("/proc/nope/out", "{file}/under-a-file", "{dir}")
"""A directory that cannot be created, a path under a file, and (for a file) a directory."""


def _outputs(url: str) -> list[tuple[list[str], str, str]]:
    """(argv, flag, what) of every output path of every command; the command reaches the
    server ``url`` if it ran at all."""
    trace = str(CORPUS / "retry-two-sets.json")
    return [
        (["check", "--url", url, "--profile", "dev"], "--report", "the report"),
        (["check", "--url", url, "--profile", "dev"], "--html", "the HTML page"),
        (["check", "--url", url, "--profile", "dev"], "--traces", "traces"),
        (["check", "--url", url, "--profile", "dev"], "--write-expect", "the expectations"),
        (["replay", trace, "--url", url], "--report", "the report"),
        (["replay", trace, "--url", url], "--html", "the HTML page"),
        (["replay", trace, "--url", url], "--pytest", ""),
        (["selftest", "--url", url, "--only", "enqueue"], "--report", "the report"),
        (["selftest", "--url", url, "--only", "enqueue"], "--json", "the report"),
        (["soak", "--url", url, "--seconds", "1"], "--report", "the report"),
        (["soak", "--url", url, "--seconds", "1"], "--html", "the HTML page"),
        (["bench", "--url", url], "--report", "the report"),
        (["bench", "--url", url], "--json", "the report"),
        (["audit", url], "--report", "the report"),
    ]


@pytest.mark.parametrize("case", range(len(_outputs(""))))
def test_every_output_path_is_checked_before_any_work(case: int, empty: ServerProcess, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """OUT-1: an output that cannot be written (its directory cannot be made, it is under
    a file, a file's path is a directory) is one line naming it, exit 2, and nothing ran:
    stdout is empty and the server was not written (not even ``{emq}:version``)."""
    argv, flag, what = _outputs(empty.url)[case]
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for shape in BAD_PATHS:
        if shape == "{dir}" and flag == "--traces":
            continue  # a directory is what --traces wants
        bad = shape.format(file=blocker, dir=tmp_path)
        code, out, err = run([*argv, flag, bad], capsys)
        line = one_line("\n".join(x for x in err.splitlines() if "--json FILE is deprecated" not in x))
        assert code == cli.EXIT_ENV and out == "", (argv, flag, bad, out)
        assert bad in line and (what in line or flag in line), line
        with empty.client() as r:
            assert r.dbsize() == 0, (argv, flag, r.keys())
