"""The CI recipe, docs/examples/conformance.yml as docs/ci.md shows it: pinned, cached,
seeded by event, its artifact and summary the failing run's own; every ``run:`` command
is one the docs document, and each ``emq`` and ``pytest`` command parses with the kit's
own parsers — ``emq``'s argparse, and pytest's with the plugin loaded (collected, not
run: the recipe's server is the CI's service, not one of ours)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from emq_kit import cli

ROOT = Path(__file__).resolve().parents[2]
SETUP = {"python -m pip install": (ROOT / "README.md", "pip install"),
         "npm ci": (ROOT / "ports" / "node" / "README.md", "npm ci")}
"""Install commands: the file that documents each, and the words it uses."""

pytest_plugins = ["pytester"]


WORKFLOW = ROOT / "docs" / "examples" / "conformance.yml"
ENV = {"pull_request": {"EMQ_SEED": "1"}, "schedule": {"EMQ_SEED": "12345678901"}}
"""The workflow's seed on each event: ``github.run_id`` nightly (a ten-digit number)."""


def recipe() -> str:
    return WORKFLOW.read_text("utf-8")


def commands(event: str = "pull_request") -> list[list[str]]:
    """The workflow's ``run:`` lines as a shell splits them on ``event``."""
    env = {**ENV[event], "GITHUB_STEP_SUMMARY": "step-summary.md"}
    runs = []
    for line in re.findall(r"^\s*(?:- )?run: (.+)$", recipe(), re.M):
        for name, value in env.items():
            line = line.replace(f'"${name}"', value)
        runs.append(shlex.split(line))
    assert len(runs) >= 4
    return runs


def test_the_page_shows_the_workflow_file_as_it_is() -> None:
    text = (ROOT / "docs" / "ci.md").read_text("utf-8")
    (shown,) = re.findall(r"<!-- ci-recipe: examples/conformance.yml -->\n```yaml\n(.*?)```", text, re.S)
    assert shown == recipe()


def test_the_workflow_pins_caches_and_seeds_by_event() -> None:
    text = recipe()
    assert re.search(r'pip install "emq @ git\+https://\S+@v\d+\.\d+\.\d+"', text)  # a tag, not a branch
    assert "cache: pip" in text and "cache: npm" in text
    assert re.search(r"^  pull_request:$", text, re.M) and re.search(r"^  schedule:\n    - cron: ", text, re.M)
    assert "EMQ_SEED: ${{ github.event_name == 'schedule' && github.run_id || '1' }}" in text
    (pytest_line,) = [c for c in commands() if c[0] == "pytest"]
    for option in ("--emq-seed", "--emq-html", "--emq-report", "--emq-summary", "--junitxml"):
        assert option in pytest_line
    assert pytest_line[pytest_line.index("--emq-summary") + 1] == "step-summary.md"
    assert "if: failure()" not in text  # the artifact is the failing run's own, never a new search


def test_every_command_is_an_install_an_emq_or_a_pytest_command() -> None:
    readme = (ROOT / "README.md").read_text("utf-8") + (ROOT / "docs" / "ci.md").read_text("utf-8")
    for argv in commands():
        line = " ".join(argv)
        setup = [s for s in SETUP if line.startswith(s)]
        if setup:
            where, words = SETUP[setup[0]]
            assert words in where.read_text("utf-8"), line
            continue
        assert argv[0] in ("emq", "pytest"), line
        if argv[0] == "emq":
            assert f"`emq {argv[1]}" in readme or f"emq {argv[1]} " in readme, line
        else:
            for option in (a.split("=")[0] for a in argv if a.startswith("--emq")):
                assert option in readme, (option, line)


@pytest.mark.parametrize("argv", [c for c in commands() if c[0] == "emq"], ids=lambda c: " ".join(c[:2]))
def test_each_emq_command_parses(argv: list[str]) -> None:
    args = cli.parser().parse_args(argv[1:])
    assert args.func is not None


@pytest.mark.parametrize("event", sorted(ENV))
def test_the_pytest_command_parses_and_collects_the_check_item(pytester: pytest.Pytester, event: str) -> None:
    (argv,) = [c for c in commands(event) if c[0] == "pytest"]
    result = pytester.runpytest_subprocess(*argv[1:], "--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    driver = argv[argv.index("--emq-driver") + 1]
    result.stdout.fnmatch_lines([f"emq::emq check[[]{driver}[]]"])
