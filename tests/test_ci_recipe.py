"""The CI recipe in docs/ci.md (issue 17, part 5): every ``run:`` command in its workflow
is one the docs document, and each ``emq`` and ``pytest`` command parses with the kit's
own parsers — ``emq``'s argparse, and pytest's with the plugin loaded (collected, not
run: the recipe's server is the CI's service, not one of ours)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from emq_kit import cli

ROOT = Path(__file__).resolve().parents[1]
SETUP = {"python -m pip install": (ROOT / "README.md", "pip install"),
         "npm ci": (ROOT / "ports" / "node" / "README.md", "npm ci")}
"""Install commands: the file that documents each, and the words it uses."""

pytest_plugins = ["pytester"]


def commands() -> list[list[str]]:
    text = (ROOT / "docs" / "ci.md").read_text("utf-8")
    (recipe,) = re.findall(r"<!-- ci-recipe -->\n```yaml\n(.*?)```", text, re.S)
    runs = [shlex.split(m) for m in re.findall(r"^\s*(?:- )?run: (.+)$", recipe, re.M)]
    assert len(runs) >= 4
    return runs


def test_every_command_is_an_install_an_emq_or_a_pytest_command() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
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


def test_the_pytest_command_parses_and_collects_the_check_item(pytester: pytest.Pytester) -> None:
    (argv,) = [c for c in commands() if c[0] == "pytest"]
    result = pytester.runpytest_subprocess(*argv[1:], "--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    driver = argv[argv.index("--emq-driver") + 1]
    result.stdout.fnmatch_lines([f"emq::emq check[[]{driver}[]]"])
