"""A check's summary in GitHub-flavoured Markdown (``emq check --summary FILE``), for a
CI's job summary (``$GITHUB_STEP_SUMMARY``): the verdict, the run's figures, a table of
every difference with its trace and replay command, each difference's step table folded
under it, and the command that reruns the search. Pure: a report in, text out."""

from __future__ import annotations

from typing import Any

from emq_kit.report.document import printable
from emq_kit.report.verdicts import words
from emq_kit.trace.replay import replay_command


def _code(text: str) -> str:
    """``text`` as inline code in a table cell (a backtick or a pipe would end it)."""
    return "`" + printable(text).replace("`", "'").replace("|", "\\|") + "`"


def check_summary(report: Any) -> str:
    """The Markdown summary of ``report`` (``check.run.Report``, its traces written)."""
    target = report.target or {}
    mark = "✅" if report.ok else "❌"
    lines = [f"### {mark} emq check: {words('check', report.detail)} — {printable(str(target.get('target', '?')))}",
             "",
             f"seed **{report.seed}**, profile {report.profile}; {report.examples:,} examples, {report.steps:,} steps, "
             f"{report.checks:,} invariant checks; cells {report.reached}/{report.total}; {report.seconds:,.1f} s",
             ""]
    known = getattr(report, "corpus", [])
    if known:
        fails = [k for k in known if k.verdict == "fails"]
        lines += [f"known traces replayed first: {len(fails)} still fail, "
                  f"{sum(k.verdict == 'passes' for k in known)} pass now", ""]
        lines += [f"- still fails: {_code(str(k.path))} {_code(str(k.now))}"
                  + (f" (expected: {printable(k.expected)})" if k.expected else "")
                  + f" — replay it: {_code(replay_command(k.path, target))}" for k in fails]
        lines += [""] if fails else []
    found = [*report.differences, *report.unreproduced]
    if found:
        lines += [f"{len(report.differences)} distinct differences in {len(report.causes)} causes"
                  + (f", {len(report.unreproduced)} not reproduced" if report.unreproduced else "") + ":", "",
                  "| # | difference | class | steps | met | trace | replay it |", "|---|---|---|---|---|---|---|"]
        for n, d in enumerate(found, 1):
            klass = d.klass if d.reproduced else "unreproduced"
            expected = " (expected)" if d.expected else ""
            replay = _code(replay_command(d.trace, target)) if d.trace else "-"
            lines.append(f"| {n} | {_code(str(d.signature))}{expected} | {klass} | {len(d.shrunk)} | {d.met} | "
                         f"{_code(str(d.trace)) if d.trace else '-'} | {replay} |")
        lines.append("")
        for n, d in enumerate(found, 1):
            if d.trace_text:
                lines += [f"<details><summary>[{n}] {printable(str(d.signature))}: its steps</summary>", "",
                          "```", printable(d.trace_text).replace("```", "'''"), "```", "", "</details>", ""]
    if report.unreached:
        lines += [f"unreached cells: {', '.join(f'{op}/{o}' for op, o in report.unreached)}", ""]
    if report.rerun:
        lines += [f"run the search again: {_code(report.rerun)}", ""]
    return "\n".join(lines)
