"""The example outputs README.md and docs/ show, read as data so tests can hold them to real
runs. A block is a fenced block right under ``<!-- docs-output: NAME -->``: its ``$ ``
lines are commands, the rest the output of the last one. What differs between two runs
of the same seed is masked before comparing (times, rates, the run's queue suffix, the
server's version); the counts, cells, signatures and verdicts are compared as shown. A
shown line ending in `` …`` stands for itself and the real lines indented under it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(r"^( *)<!-- docs-output: ([\w-]+)(?:, checked by (\S+))? -->\n\1```\n(.*?)\n\1```$", re.S | re.M)
ELIDED = " …"
MASKS = [
    (re.compile(r"\b\d+(?:\.\d+)? s\b"), "T s"),  # wall time, time to a difference
    (re.compile(r"\b\d[\d,]* checked steps/s"), "N checked steps/s"),  # 1,234 past a thousand
    (re.compile(r"seconds \d+(?:\.\d+)?"), "seconds T"),
    (re.compile(r"-[0-9a-f]{8}'"), "-SUFFIX'"),  # the run's own queue names (OWN-2)
    (re.compile(r" object at 0x[0-9a-f]+>"), " object at ADDRESS>"),  # a repr in a difference's evidence
    (re.compile(r"\b(fakeredis|valkey|redis) \d+(?:\.\d+)*\)"), r"\1 VERSION)"),
]


@dataclass(frozen=True)
class Block:
    """One shown example: where it is, its commands and its output lines."""

    path: Path
    name: str
    checked_by: str | None  # a test module that checks it in its own run, else None
    commands: list[str]
    output: list[str]
    indent: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.name}"


def blocks() -> list[Block]:
    """Every marked block of README.md and docs/*.md."""
    found = []
    for path in DOCS:
        for indent, name, checked_by, body in MARK.findall(path.read_text("utf-8")):
            lines = [line[len(indent):] for line in body.split("\n")]
            commands = [line[2:] for line in lines if line.startswith("$ ")]
            output = [line for line in lines if not line.startswith("$ ")]
            found.append(Block(path, name, checked_by or None, commands, output, indent))
    return found


def block(name: str) -> Block:
    (found,) = [b for b in blocks() if b.name == name]
    return found


def mask(line: str) -> str:
    for pattern, replacement in MASKS:
        line = pattern.sub(replacement, line)
    return line.rstrip()


def as_shown(shown: list[str], real: list[str]) -> list[str]:
    """``real`` as the block shows it: each shown line ending in `` …`` elides the real
    lines indented under its twin."""
    out: list[str] = []
    elide = {line[: -len(ELIDED)] for line in shown if line.endswith(ELIDED)}
    skip_deeper: int | None = None
    for line in real:
        depth = len(line) - len(line.lstrip())
        if skip_deeper is not None and line.strip() and depth > skip_deeper:
            continue
        skip_deeper = None
        if line.rstrip() in elide:
            out.append(line.rstrip() + ELIDED)
            skip_deeper = depth
        else:
            out.append(line.rstrip())
    while out and not out[-1]:
        out.pop()
    return out


def differences(shown: list[str], real: list[str]) -> list[str]:
    """The shown lines that the real output, masked, does not match (empty when it does)."""
    want, got = [mask(x) for x in shown], [mask(x) for x in as_shown(shown, real)]
    if want == got:
        return []
    return [f"shown: {w!r}\n real: {g!r}" for w, g in zip(want, got, strict=False) if w != g] or [
        f"shown {len(want)} lines, real {len(got)}"]


def rewrite(found: Block, real: list[str]) -> None:
    """Put ``real`` (elided as shown) into the block's place in its file."""
    text = found.path.read_text("utf-8")
    ind = found.indent
    old = "\n".join(ind + line if line else line for line in [*[f"$ {c}" for c in found.commands], *found.output])
    new = "\n".join(ind + line if line else line
                    for line in [*[f"$ {c}" for c in found.commands], *as_shown(found.output, real)])
    assert text.count(old) == 1, found.id
    found.path.write_text(text.replace(old, new), "utf-8")
