"""README.md and docs/ show real outputs: every marked example block (tests/shown.py) is
run as shown — each ``$`` line through bash, in a scratch directory, ``emq`` and
``python`` those of this environment — and its output compared with the block, masking
only what differs between runs of the same seed. ``EMQ_DOCS_WRITE=1`` writes the real
outputs into the blocks instead of failing (then review the diff). Small profiles and
fixed seeds: each runs in seconds.

The documents' links point at files that exist, and every output shown after a ``$``
line is a marked block, so none can go stale unseen."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shown import DOCS, MARK, ROOT, Block, blocks, differences, mask, rewrite

SHOWN_URL = re.compile(r"redis://127\.0\.0\.1:\d+(?:/\d+)?")
"""A server address as the documents write it; the test's own server stands in."""


def _run(found: Block, scratch: Path, url: str | None) -> list[str]:
    """Run the block's commands in ``scratch`` (with this repository's ``emq_live`` and
    ``tests`` beside, as in a clone); the output of the last, the documents' names put
    back for the scratch paths and the server's address."""
    tmp = scratch / "tmp"
    tmp.mkdir()
    for name in ("emq_live", "tests"):
        (scratch / name).symlink_to(ROOT / name)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "EMQ_DEBUG": ""}
    shown_url = None
    done = None
    for command in found.commands:
        if url is not None:
            shown_url = SHOWN_URL.search(command).group(0) if SHOWN_URL.search(command) else shown_url
            command = SHOWN_URL.sub(url, command)
        done = subprocess.run(["bash", "-c", command.replace("/tmp/", f"{tmp}/")], cwd=scratch, env=env,
                              capture_output=True, text=True, timeout=300)
        assert not done.stderr.startswith("emq bug"), done.stderr
    assert done is not None
    out = done.stdout.replace(f"{tmp}/", "/tmp/")
    if url is not None and shown_url is not None:
        out = out.replace(url, shown_url)
    return out.rstrip("\n").split("\n")


@pytest.mark.parametrize("found", [b for b in blocks() if b.checked_by is None], ids=lambda b: b.id)
def test_each_shown_output_is_what_the_command_prints(found: Block, tmp_path: Path,
                                                      request: pytest.FixtureRequest) -> None:
    needs_server = any(SHOWN_URL.search(c) for c in found.commands)
    url = request.getfixturevalue("valkey").url if needs_server else None
    real = _run(found, tmp_path, url)
    if os.environ.get("EMQ_DOCS_WRITE") == "1":
        rewrite(found, real)
        return
    wrong = differences(found.output, real)
    assert not wrong, f"{found.id} is stale (EMQ_DOCS_WRITE=1 rewrites it):\n" + "\n".join(wrong[:10])


def test_a_block_checked_elsewhere_names_a_test_that_reads_it() -> None:
    for found in blocks():
        if found.checked_by is not None:
            assert f'block("{found.name}")' in (ROOT / found.checked_by).read_text("utf-8"), found.id


def test_every_shown_command_output_is_a_marked_block() -> None:
    """A fenced block that starts with a ``$`` line shows a command's output: marked, or it
    could go stale unseen."""
    for path in DOCS:
        text = path.read_text("utf-8")
        marked = {m.start(4) for m in MARK.finditer(text)}
        for m in re.finditer(r"^( *)```\w*\n(\1\$ .*)", text, re.M):
            assert m.start(2) in marked, f"{path.name}: unmarked output block at {m.group(2)!r}"


def test_every_relative_link_names_a_file_that_exists() -> None:
    for path in DOCS:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", path.read_text("utf-8")):
            if not target.startswith(("http://", "https://")):
                assert (path.parent / target).exists(), f"{path.relative_to(ROOT)}: {target}"


FIRST = ["```sh",
         "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/emq check   "
         "# set up, then check the embedded default",
         "bash scripts/test.sh                                                              "
         "# set up (Valkey, luacheck, .venv) and run the tests",
         "```"]
"""The README's first lines: a newcomer's two commands, first and as they were."""


def test_the_readme_is_a_guide_of_at_most_450_lines_that_starts_with_the_two_commands() -> None:
    lines = (ROOT / "README.md").read_text("utf-8").split("\n")
    assert len(lines) <= 450 and lines[0] == "# emq" and lines[2:6] == FIRST


def _check_options() -> set[str]:
    import argparse

    from emq_kit import cli

    (sub,) = [a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {o for a in sub.choices["check"]._actions for o in a.option_strings} - {"-h", "--help"}


def test_the_check_synopsis_lists_every_option_of_emq_check_and_no_other() -> None:
    text = (ROOT / "docs" / "commands.md").read_text("utf-8")
    (synopsis,) = re.findall(r"```\n(emq check \[.*?)```", text, re.S)
    assert set(re.findall(r"--[a-z][a-z-]*", synopsis)) == _check_options()


def test_each_pytest_option_shown_is_the_plugins() -> None:
    """Each ``--emq-X`` a synopsis shows is ``emq check --X`` (the plugin passes it on)
    or one of the plugin's own."""
    plugin = (ROOT / "emq_kit" / "pytest_plugin.py").read_text("utf-8")
    for path in (ROOT / "README.md", ROOT / "docs" / "ci.md"):
        for synopsis in re.findall(r"```\n(pytest --emq .*?)```", path.read_text("utf-8"), re.S):
            for flag in set(re.findall(r"--emq-[a-z-]*[a-z]", synopsis)):
                assert f"--{flag[6:]}" in _check_options() or f'"{flag}"' in plugin, (path.name, flag)


def test_a_rate_past_a_thousand_is_masked_like_one_below() -> None:
    # the text report writes its rate with a thousands separator (report/text.py)
    line = "  wall {:.2f} s   {:,.0f} checked steps/s"
    assert mask(line.format(1.5, 999.0)) == mask(line.format(12.25, 1234.0)) == mask(line.format(3, 1_234_567))
