"""The HTML report: one self-contained page — inline CSS and SVG, no script, no network,
no framework — for a counterexample, a check or a soak.

- ``counterexample_page(trace)``: the shrunk steps and, per step, the keyspace before and
  after it as columns — the four locations, the lanes (ring, paused groups, limits,
  weights) and stray keys when there are any, the rows and the counters — replayed from
  the trace on ``QueueModel``; at the diverging step the target's keyspace beside the
  model's with every differing id, field, lane item and counter highlighted, the
  invariants the target broke (not those the model's keyspace breaks too: a key the kit
  spoiled) and the signature the divergence is listed by.
- ``check_html(report)``: a check's verdict, figures, rerun command and op × outcome
  coverage heat map (``heatmap``); then every difference, under its cause (causes
  first, lifecycle before surface), each drawn as above with its replay command; then
  those that did not reproduce, and the text summary wrapped to the page.
- ``soak_page(events, checked)``: the history as a timeline, a lane per process and a bar
  per op from invocation to response, the ops of the partition that failed the
  linearizability check highlighted; throughput and latency over time.

Everything shown is escaped: ids, payloads and answers are arbitrary bytes, shown as
printable text (``report.printable``) and then HTML-escaped.
"""

from __future__ import annotations

import html
import statistics
from pathlib import Path
from typing import Any, Iterable, Sequence

from emq_kit.check import faults
from emq_kit.check.raw.contract import call_of, verdict
from emq_kit.check.step import SLEEP, Step
from emq_kit.report import heatmap
from emq_kit.report.document import printable
from emq_kit.report.text import format_report, two_runs
from emq_kit.report.verdicts import DIFFERS, headline, words
from emq_kit.soak.history import SNAPSHOT, Checked, Event, describe
from emq_kit.soak.linearize import PartitionVerdict
from emq_kit.trace.format import Trace, encode
from emq_kit.trace.replay import replay_command
from emq_model import invariants, spec
from emq_model.errors import EmqError
from emq_model.model import QueueModel
from emq_model.snapshot import Snapshot, diff
from emq_model.spec import LOCATIONS

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1b1b;background:#fff}
h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.15em;margin:1.4em 0 .4em}
code,.ids,td.args,td.answer{font-family:ui-monospace,monospace;font-size:12.5px}
table{border-collapse:collapse;margin:.3em 0}th,td{border:1px solid #ccc;padding:.2em .5em;vertical-align:top;text-align:left}
th{background:#f2f2f2}tr.diverges>td,tr.fails>td{background:#ffe3e3}
.verdict{display:inline-block;padding:.1em .6em;border-radius:.3em;color:#fff;background:#b00020}
.verdict.ok{background:#1b7f3a}.rule{font-weight:600;color:#b00020}
.id{display:inline-block;margin:0 .3em .1em 0;padding:0 .25em;border-radius:.2em;background:#eef}
.id.added{background:#d7f5dd}.id.removed{background:#eee;text-decoration:line-through;color:#777}
.id.differs{background:#ffb3b3;outline:2px solid #b00020}
ul.evidence li,ul.violations li{font-family:ui-monospace,monospace;font-size:12.5px}
.step{margin:.6em 0 1em;padding:.4em .6em;border-left:4px solid #ccc}.step.diverges{border-left-color:#b00020}
.cause{margin:1em 0 1.6em;padding:.4em .8em;border:1px solid #ddd;border-radius:.3em}
.klass{display:inline-block;padding:0 .4em;border-radius:.2em;font-size:12px;background:#eee}
.klass.lifecycle{background:#ffe3e3}.klass.surface{background:#e3ecff}
svg text{font:11px system-ui,sans-serif}
.field.differs,.row.differs,span.differs{background:#ffb3b3;outline:1px solid #b00020}
.field.added,.row.added,span.added{background:#d7f5dd}
pre.summary{white-space:pre-wrap;overflow-wrap:anywhere;background:#f7f7f7;padding:.6em;border:1px solid #ddd}
code{overflow-wrap:anywhere}.wide{overflow-x:auto}table.figures th{text-align:left}
.difference{margin:1em 0 1.6em;padding:.2em .8em;border-left:4px solid #b00020}
"""


def _e(value: Any) -> str:
    """``value`` as escaped, printable text."""
    text = value if isinstance(value, str) else repr(value)
    return html.escape(printable(text), quote=True)


def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">'
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body>\n{body}\n</body></html>\n")


def write(path: str | Path, page: str) -> Path:
    """Write ``page`` to ``path`` (UTF-8); the path."""
    from emq_kit.redaction import write_text

    return write_text(path, page)


# -- a counterexample ----------------------------------------------------------------------


def _answer(value: Any) -> str:
    if isinstance(value, EmqError):
        return value.code
    return repr(value) if not isinstance(value, str) else value


def _call(step: Step) -> tuple[str, dict[str, Any]]:
    """The model's op and arguments of ``step``: a raw call's as the contract decodes its
    bytes (a refused one raises its refusal; its step names no queue)."""
    if step.op != "raw":
        return step.op, step.args
    call = call_of(step.args)
    decoded = verdict(call.op, call.keys, call.argv)
    if isinstance(decoded, EmqError):
        raise decoded
    return call.op, decoded.args


def model_keyspaces(steps: Sequence[Step]) -> list[tuple[Snapshot, Snapshot, Any] | None]:
    """For each step, the model's keyspace of its queue before and after it and the
    model's answer (``None`` for a step with no keyspace: opening a queue by a refused
    name): the trace replayed on ``QueueModel`` alone, pure."""
    models: dict[str, QueueModel] = {}
    out: list[tuple[Snapshot, Snapshot, Any] | None] = []
    now = 0  # a server-clock trace's clock: the one each clock op ran at (``at``), else the last
    for s in steps:
        now = s.at if s.at is not None else s.args.get("now", now) if isinstance(s.args.get("now"), int) else now
        if s.op in ("queue", SLEEP):
            out.append(None)
            continue
        try:
            model = models.setdefault(s.queue, QueueModel(s.queue))
        except EmqError:
            out.append(None)
            continue
        before = model.snapshot()
        answer: Any = None
        try:
            if s.op in faults.ARGS:
                faults.on_model(model, s.op, s.args)
            else:
                op, args = _call(s)
                clocked = op in spec.OPS and spec.OPS[op]["clock"] and "now" not in args  # a server-clock step
                answer = getattr(model, op)(**args, **({"now": now} if clocked else {}))
        except EmqError as refused:
            answer = refused  # a refusal changes nothing
        out.append((before, model.snapshot(), answer))
    return out


def _marked(text: str, key: str, differs: bool, mark: str) -> str:
    cls = "id" + (f" {mark}" if differs and mark else "")
    return f'<span class="{cls}" data-id="{_e(key)}">{_e(text)}</span>'


def _ids(snap: Snapshot, loc: str, other: Snapshot | None, mark: str) -> str:
    """The ids of ``loc`` in ``snap``, each marked ``mark`` when ``other`` (the snapshot
    compared with) does not hold it there with the same score."""
    theirs = dict(other.location(loc)) if other is not None else None
    parts = [_marked(member if loc in ("pending", "dead") else f"{member}@{score}", member,
                     theirs is not None and theirs.get(member, object()) != score, mark)
             for member, score in snap.location(loc)]
    return " ".join(parts) or "&nbsp;"


def _rows(snap: Snapshot, other: Snapshot | None, mark: str) -> str:
    """Each row as ``id: field=value, ...``; a row ``other`` lacks marked whole, a field
    whose value ``other``'s row does not share marked alone (the differing fields)."""
    theirs = other.row_map() if other is not None else None
    lines = []
    for job, fields in snap.rows:
        row = None if theirs is None else theirs.get(job)
        whole = theirs is not None and row is None
        shown = ", ".join(
            (f'<span class="field {mark}">' if row is not None and mark and row.get(f) != v else "<span class=\"field\">")
            + f"{_e(f)}={_e(v)}</span>" for f, v in fields)
        lines.append(f'<span class="row{" " + mark if whole and mark else ""}" data-row="{_e(job)}">{_e(job)}: '
                     f"{shown}</span>")
    return "<br>".join(lines) or "&nbsp;"


def _lanes(snap: Snapshot, other: Snapshot | None, mark: str) -> str:
    """The lanes (lifecycle.md §10): each group's lane ids, the ring, the paused groups
    and the limit, active and weight hashes, each item marked when ``other`` differs."""
    parts = []
    theirs = other.lane_map() if other is not None else None
    for group, entries in snap.lanes:
        lane = None if theirs is None else theirs.get(group, {})
        ids = " ".join(_marked(f"{m}@{s}", m, lane is not None and lane.get(m, object()) != s, mark)
                       for m, s in entries)
        parts.append(f'<div class="lane">lane {_e(group)}: {ids}</div>')
    if snap.ring:
        same = other is None or other.ring == snap.ring
        parts.append(f'<div>ring: <span class="{"" if same or not mark else mark}">'
                     + " → ".join(_e(g) for g in snap.ring) + "</span></div>")
    if snap.paused:
        same = other is None or other.paused == snap.paused
        parts.append(f'<div>paused: <span class="{"" if same or not mark else mark}">'
                     + ", ".join(_e(g) for g in snap.paused) + "</span></div>")
    for name, title in (("glimit", "limits"), ("gactive", "active per group"), ("gweight", "weights")):
        mine = getattr(snap, name)
        if mine:
            others = dict(getattr(other, name)) if other is not None else None
            parts.append(f"<div>{title}: " + ", ".join(
                f'<span class="{mark if others is not None and mark and others.get(g) != v else ""}">{_e(g)}={v}</span>'
                for g, v in mine) + "</div>")
    return "".join(parts) or "&nbsp;"


def _has_lanes(snap: Snapshot) -> bool:
    return bool(snap.lanes or snap.ring or snap.paused or snap.glimit or snap.gactive or snap.gweight)


def _keyspace_table(rows: list[tuple[str, Snapshot, Snapshot | None, str]]) -> str:
    """Locations as columns, then the lanes and the stray keys when any snapshot has
    them, the rows and the counters; one row per (label, snapshot, compared-with, mark)."""
    lanes = any(_has_lanes(snap) for _, snap, _, _ in rows)
    stray = any(snap.stray for _, snap, _, _ in rows)
    head = ("".join(f"<th>{loc}</th>" for loc in LOCATIONS) + ("<th>lanes</th>" if lanes else "")
            + ("<th>stray keys</th>" if stray else "") + "<th>rows</th><th>counters</th>")
    body = []
    for label, snap, other, mark in rows:
        cells = "".join(f'<td class="ids">{_ids(snap, loc, other, mark)}</td>' for loc in LOCATIONS)
        if lanes:
            cells += f'<td class="ids lanes">{_lanes(snap, other, mark)}</td>'
        if stray:
            keys = set(other.stray) if other is not None else None
            cells += '<td class="ids">' + ("<br>".join(
                _marked(k, k, keys is not None and k not in keys, mark) for k in snap.stray) or "&nbsp;") + "</td>"
        counters = "<br>".join(
            f'<span class="{mark if other is not None and mark and getattr(other, c) != getattr(snap, c) else ""}">'
            f"{c} {getattr(snap, c)}</span>" for c in ("completed", "failed"))
        body.append(f"<tr><th>{_e(label)}</th>{cells}<td class=\"ids\">{_rows(snap, other, mark)}</td>"
                    f"<td>{counters}</td></tr>")
    return f"<table class=\"keyspace\"><tr><th></th>{head}</tr>{''.join(body)}</table>"


def counterexample_page(trace: Trace, *, source: str | None = None, replayed: str | None = None) -> str:
    """The page of a counterexample trace (specs/trace.md); ``replayed``: the verdict of
    the replay that drew it (``emq replay``'s detail word), said above it."""
    d = trace.divergence or {}
    said = "" if replayed is None else f'<p class="replayed">{_e(headline("replay", replayed))}</p>'
    return _page(f"emq counterexample {_signature(d)}", said + counterexample(trace, source=source))


def _signature(d: dict[str, Any]) -> str:
    """A trace's divergence by its signature (an older trace recorded only the rule)."""
    return f"{d['cell']} {d.get('rule', '-')}" if d.get("cell") else d.get("rule", "-")


def counterexample(trace: Trace, *, source: str | None = None, prefix: str = "", level: int = 1) -> str:
    """A counterexample trace drawn: its heading (at ``level``), the evidence, the steps
    and the keyspace step by step; element ids start with ``prefix`` (a page may draw
    several)."""
    d = trace.divergence or {}
    index = d.get("step", 0)
    rule, kind = d.get("rule", "-"), d.get("kind", "-")
    cell = f'<span class="cell">{_e(d["cell"])}</span> ' if d.get("cell") else ""
    h, h2, h3 = (f"h{min(level + k, 6)}" for k in range(3))  # HTML has six heading levels
    target = trace.header.get("target", {})
    parts = [f"<{h}>emq counterexample: {cell}<span class=\"rule\">{_e(rule)}</span></{h}>",
             f'<p><span class="verdict differs">{DIFFERS}</span> the {_e(kind)} at step {index} of {len(trace.steps)}; '
             f"target {_e(target.get('target', '?'))} ({_e(target.get('server', '?'))}), "
             f"seed {_e(trace.header.get('seed'))}, clock {_e(trace.header.get('clock', 'virtual'))}"
             + (f", trace <code>{_e(source)}</code>" if source else "") + "</p>"]
    if d.get("evidence"):
        parts.append(f"<{h2}>Evidence</{h2}><ul class=\"evidence\">"
                     + "".join(f"<li>{_e(line)}</li>" for line in d["evidence"]) + "</ul>")
    parts.append(f"<{h2}>Shrunk steps</{h2}><table><tr><th>#</th><th>queue</th><th>op</th><th>args</th>"
                 "<th>model</th><th>target</th></tr>")
    for i, s in enumerate(trace.steps, 1):
        args = ", ".join(f"{k}={_e(_shown(v))}" for k, v in s.args.items())
        cls = ' class="diverges"' if i == index else ""
        parts.append(f"<tr{cls} id=\"{prefix}row-{i}\"><td>{i}</td><td>{_e(s.queue)}</td><td>{_e(s.op)}</td>"
                     f"<td class=\"args\">{args}</td><td class=\"answer\">{_e(_answer(s.model))}</td>"
                     f"<td class=\"answer\">{_e(_answer(s.target))}</td></tr>")
    parts.append(f"</table><{h2}>The keyspace, step by step</{h2}>")
    for i, (s, seen) in enumerate(zip(trace.steps, model_keyspaces(trace.steps)), 1):
        diverges = i == index
        parts.append(f'<div class="step{" diverges" if diverges else ""}" id="{prefix}step-{i}">'
                     f"<{h3}>{i}. {_e(s.op)} on {_e(s.queue)}</{h3}>")
        if seen is None:
            said = (f"a wait: the clock moves on {_e(s.args.get('ms'))} ms past the last clock op's" if s.op == SLEEP
                    else "no keyspace: the queue name is refused")
            parts.append(f"<p>{said}</p></div>")
            continue
        before, after, answer = seen
        if s.op not in faults.ARGS and _answer(answer) != _answer(s.model):
            parts.append(f"<p class=\"rule\">the model replayed here answers {_e(_answer(answer))}, the trace records "
                         f"{_e(_answer(s.model))}: the keyspace below may not be the run's (a server-clock trace?)</p>")
        rows = [("before", before, None, ""), ("after (model)", after, before, "added")]
        theirs = trace.snapshots.get("target") if diverges else None
        if theirs is not None:
            mine = trace.snapshots.get("model", after)
            rows = [("before", before, None, ""), ("after (model)", mine, theirs, "differs"),
                    ("after (target)", theirs, mine, "differs")]
        parts.append(_keyspace_table(rows))
        if theirs is not None:
            differences = diff(rows[1][1], theirs)
            if differences:
                parts.append("<p>target against model:</p><ul class=\"evidence\">"
                             + "".join(f"<li>{_e(line)}</li>" for line in differences) + "</ul>")
            broken = invariants.beyond(theirs, rows[1][1])  # not the operator's (FLT-2)
            parts.append("<p>invariants the target broke (the model's keyspace keeps them): "
                         + (("</p><ul class=\"violations\">" + "".join(f"<li>{_e(str(v))}</li>" for v in broken) + "</ul>")
                            if broken else "none</p>"))
            parts.append(f"<p>listed as: {cell}<span class=\"rule\">{_e(rule)}</span> (specs/lifecycle.md)</p>")
        parts.append("</div>")
    return "\n".join(parts)


def check_html(report: Any) -> str:
    """``emq check --html``'s page of ``report``: every difference when the run met one,
    the readable summary of a run that met none; the coverage matrix on both."""
    lines = format_report(report).splitlines()
    if report.differences or report.unreproduced:
        return check_page(report, lines)
    return _page("emq check", _check_head(report) + _corpus(report) + _coverage(report) + _summary(lines))


def _check_head(report: Any) -> str:
    """A check's heading: the verdict, the run's figures and the command that reruns it."""
    target = report.target or {}
    figures = [("target", f"{target.get('target', '?')} ({target.get('server', '?')})"),
               ("profile", report.profile), ("seed", report.seed), ("examples", f"{report.examples:,}"),
               ("steps", f"{report.steps:,}"), ("invariant checks", f"{report.checks:,}"),
               ("cells reached", f"{report.reached} of {report.total}"), ("seconds", f"{report.seconds:,.1f}")]
    found = (f" {len(report.differences)} distinct differences in {len(report.causes)} causes (lifecycle first, "
             "then surface)" if report.differences else "")
    rerun = getattr(report, "rerun", "")
    said = words("check", report.detail)
    return (f"<h1>emq check: {_e(said)}</h1>"
            f'<p><span class="verdict {report.verdict}{"" if not report.ok else " ok"}">{_e(said)}</span>{_e(found)}</p>'
            '<table class="figures">' + "".join(f"<tr><th>{_e(k)}</th><td>{_e(str(v))}</td></tr>" for k, v in figures)
            + "</table>" + (f'<p>run the search again: <code class="command" id="rerun">{_e(rerun)}</code></p>'
                            if rerun else ""))


def _coverage(report: Any) -> str:
    """The op × outcome matrix of the run (``heatmap``), every check page's."""
    matrix = heatmap.cells(report.hits, (f"{op}/{o}" for op, o in report.unreached),
                           (f"{op}/{o}" for op, o in getattr(report, "not_implemented", ())),
                           (f"{op}/{o}" for op, o in getattr(report, "out_of_focus", ())))
    return ('<h2 id="coverage">Coverage: op × outcome</h2>'
            + "".join(f'<div class="wide">{heatmap.heatmap(part)}</div>' for part in heatmap.split(matrix)))


def _corpus(report: Any) -> str:
    """The known traces replayed before the search: those that still fail first."""
    known = getattr(report, "corpus", [])
    if not known:
        return ""
    order = {"fails": 0, "passes": 1, "skipped": 2}
    rows = "".join(
        f'<tr class="{k.verdict}"><td>{_e(k.verdict)}</td><td><code>{_e(str(k.path))}</code></td>'
        f"<td>{_e(str(k.signature or '-'))}</td><td>{_e(str(k.now or ''))}{_e(f' (expected: {k.expected})' if k.expected else '')}"
        f"{_e(k.reason)}</td><td>"
        + (f'<code class="command replay">{_e(replay_command(k.path, report.target))}</code>' if k.verdict == "fails"
           else "") + "</td></tr>" for k in sorted(known, key=lambda k: order[k.verdict]))
    fails = sum(k.verdict == "fails" for k in known)
    return (f'<h2 id="corpus">Known traces, replayed first: {fails} still fail</h2><table><tr><th>verdict</th>'
            f"<th>trace</th><th>written as</th><th>now</th><th>replay it</th></tr>{rows}</table>")


def _summary(lines: Sequence[str]) -> str:
    """The text report's lines, wrapped to the page (never a sideways scroll)."""
    return '<h2 id="summary">Summary</h2><pre class="summary">' + "\n".join(_e(line) for line in lines) + "</pre>"


def check_page(report: Any, summary: Sequence[str]) -> str:
    """The page of a check with differences (``check.run.Report``, its traces written):
    its heading and coverage, then the causes, each with every one of its differences
    drawn from its trace (steps, keyspaces, replay and rerun commands); then those that
    did not reproduce; ``summary``, the text report's lines, last."""
    number = {id(d): n for n, d in enumerate(report.differences, 1)}
    parts = [_check_head(report), "<h2>Differences</h2><table><tr><th>#</th><th>signature</th><th>class</th>"
             "<th>cause</th><th>steps</th><th>met</th><th>trace</th></tr>"]
    cause_of = {id(d): n for n, c in enumerate(report.causes, 1) for d in c.differences}
    for d in report.differences:
        n = number[id(d)]
        parts.append(f'<tr><td><a href="#diff-{n}">[{n}]</a></td><td>{_e(str(d.signature))}</td>'
                     f'<td><span class="klass {d.klass}">{d.klass}</span></td>'
                     f'<td><a href="#cause-{cause_of.get(id(d), 0)}">{cause_of.get(id(d), "-")}</a></td>'
                     f"<td>{len(d.shrunk)}</td><td>{d.met}</td><td><code>{_e(str(d.trace or '-'))}</code></td></tr>")
    parts.append("</table>")
    parts.append(_corpus(report))
    parts.append(_coverage(report))
    parts.append("<h2>Causes</h2>")
    for c, cause in enumerate(report.causes, 1):
        parts.append(f'<section class="cause" id="cause-{c}"><h3>cause {c}: {_e(cause.title)} '
                     f'<span class="klass {cause.klass}">{cause.klass}</span></h3>'
                     f"<p>{len(cause.ops)} op{'s' if len(cause.ops) != 1 else ''}: {_e(', '.join(cause.ops))}; "
                     f"{len(cause.differences)} difference{'s' if len(cause.differences) != 1 else ''}, the shortest "
                     f"[{number[id(cause.representative)]}] first</p>")
        ordered = [cause.representative] + [d for d in cause.differences if d is not cause.representative]
        parts.extend(_difference(report, d, number[id(d)]) for d in ordered)
        parts.append("</section>")
    if report.unreproduced:
        parts.append('<h2 id="unreproduced">Did not reproduce (timing-dependent, or not deterministic: DET-1)</h2>'
                     "<p>met by the search; no replay of its steps showed it: not counted among the differences</p><ul>")
        for d in report.unreproduced:
            runs = "".join(f"<br>{_e(line)}" for line in two_runs(d)) if d.again is not None else ""
            parts.append(f"<li>{_e(str(d.signature))}: replayed {d.replays} times ({_e(', '.join(d.seen))})"
                         + (f", trace <code>{_e(str(d.trace))}</code>" if d.trace else "") + runs + "</li>")
        parts.append("</ul>")
    parts.append(_summary(summary))
    return _page(f"emq check {words('check', report.detail)}", "\n".join(parts))


def _difference(report: Any, d: Any, n: int) -> str:
    """One difference of a check as its own section ``diff-n``: its signature, class and
    figures, the commands that replay it and rerun the search, and its counterexample
    read from its trace (its evidence and text when no trace was written)."""
    head = (f'<section class="difference" id="diff-{n}" data-signature="{_e(str(d.signature))}">'
            f'<h4>[{n}] {_e(str(d.signature))} <span class="klass {d.klass}">{d.klass}</span></h4>'
            f"<p>{len(d.shrunk)} steps; met {d.met} time{'s' if d.met != 1 else ''}, first after {d.seconds:.2f} s"
            + (f"; expected: {_e(d.expected)}" if d.expected else "") + "</p>")
    commands = []
    if d.trace is not None:
        commands.append(f'replay it: <code class="command replay">{_e(replay_command(d.trace, report.target))}</code>')
    if getattr(report, "rerun", ""):
        commands.append(f'rerun the search: <code class="command">{_e(report.rerun)}</code>')
    body = "<p>" + "<br>".join(commands) + "</p>" if commands else ""
    if d.trace is not None and Path(d.trace).is_file():
        body += counterexample(Trace.load(d.trace), source=str(d.trace), prefix=f"d{n}-", level=5)
    else:
        body += ("<p>no trace was written: its evidence</p><ul class=\"evidence\">"
                 + "".join(f"<li>{_e(line)}</li>" for line in d.divergence.lines) + "</ul>"
                 + (f'<pre class="summary">{_e(d.trace_text)}</pre>' if d.trace_text else ""))
    return head + body + "</section>"


def _shown(value: Any) -> str:
    """An argument as the trace shows it (bytes as ``$bytes``), so nothing is lost."""
    enc = encode(value)
    return enc if isinstance(enc, str) else repr(value)


# -- a soak --------------------------------------------------------------------------------

LANE, LEFT, WIDTH = 18, 110, 900


def _partition_ops(verdict: PartitionVerdict | None) -> set[tuple[str, int, int]]:
    if verdict is None:
        return set()
    return {(str(o.process), o.invoke, o.ret) for o in verdict.ops}


def timeline(events: Sequence[Event], highlight: set[tuple[str, int, int]]) -> str:
    """An SVG: a lane per process, a bar per op from invocation to response; the ops in
    ``highlight`` (process, invoke, ret) drawn red."""
    ops = [e for e in events if e.ret >= e.invoke]
    if not ops:
        return "<p>no ops recorded</p>"
    lanes = sorted({e.process for e in ops})
    t0, t1 = min(e.invoke for e in ops), max(e.ret for e in ops)
    span = max(t1 - t0, 1)
    height = LANE * len(lanes) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + WIDTH + 10}" height="{height}" '
           f'role="img" aria-label="history timeline">']
    for n, lane in enumerate(lanes):
        y = n * LANE + 4
        out.append(f'<text x="4" y="{y + 12}">{_e(lane)}</text>'
                   f'<line x1="{LEFT}" x2="{LEFT + WIDTH}" y1="{y + 8}" y2="{y + 8}" stroke="#eee"/>')
    row = {lane: n for n, lane in enumerate(lanes)}
    for e in sorted(ops, key=lambda e: (e.process, e.invoke, e.ret) in highlight):  # the failing ops on top
        x = LEFT + (e.invoke - t0) * WIDTH / span
        w = max((e.ret - e.invoke) * WIDTH / span, 1.5)
        y = row[e.process] * LANE + 4
        hot = (e.process, e.invoke, e.ret) in highlight
        fill = "#d00020" if hot else "#6b8fd6"
        out.append(f'<rect class="op{" failing" if hot else ""}" x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="12" '
                   f'fill="{fill}"><title>{_e(_label(e))}</title></rect>')
    out.append(f'<text x="{LEFT}" y="{height - 6}">0 ms</text>'
               f'<text x="{LEFT + WIDTH - 60}" y="{height - 6}">{span / 1e6:,.1f} ms</text></svg>')
    return "".join(out)


def _label(e: Event) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in e.args.items())
    output = "(the whole queue)" if e.op == SNAPSHOT else repr(e.output)
    return f"{e.process}: {e.op}({args}) -> {output} [{(e.ret - e.invoke) / 1e3:,.0f} us]"


def _chart(points: Sequence[tuple[float, float]], label: str, unit: str) -> str:
    """A small SVG line chart of ``points`` (x seconds, y value)."""
    w, h, pad = 420, 150, 34
    if not points:
        return f"<p>{_e(label)}: no data</p>"
    xmax = max(x for x, _ in points) or 1.0
    ymax = max(y for _, y in points) or 1.0
    path = " ".join(f"{pad + x / xmax * (w - pad - 8):.1f},{h - pad - y / ymax * (h - pad - 10):.1f}" for x, y in points)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="{_e(label)}">'
            f'<text x="{pad}" y="12">{_e(label)} (max {ymax:,.1f} {_e(unit)})</text>'
            f'<line x1="{pad}" y1="{h - pad}" x2="{w - 8}" y2="{h - pad}" stroke="#999"/>'
            f'<line x1="{pad}" y1="10" x2="{pad}" y2="{h - pad}" stroke="#999"/>'
            f'<polyline fill="none" stroke="#1b5fbf" stroke-width="1.5" points="{path}"/>'
            f'<text x="{pad}" y="{h - pad + 14}">0 s</text><text x="{w - 60}" y="{h - pad + 14}">{xmax:,.2f} s</text></svg>')


def rates(events: Sequence[Event], buckets: int = 40) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """Throughput (ops/s by response time) and median latency (ms) over ``buckets``
    equal slices of the run."""
    ops = [e for e in events if e.ret >= e.invoke]
    if not ops:
        return [], []
    t0, t1 = min(e.invoke for e in ops), max(e.ret for e in ops)
    width = max(t1 - t0, 1) / buckets
    slices: list[list[Event]] = [[] for _ in range(buckets)]
    for e in ops:
        slices[min(int((e.ret - t0) / width), buckets - 1)].append(e)
    seconds = width / 1e9
    through = [((n + 1) * seconds, len(s) / seconds) for n, s in enumerate(slices)]
    latency = [((n + 1) * seconds, statistics.median((e.ret - e.invoke) / 1e6 for e in s)) for n, s in enumerate(slices) if s]
    return through, latency


def soak_page(events: Sequence[Event], checked: Checked | None, *, title: str = "emq soak",
              problems: Iterable[str] = ()) -> str:
    """The page of a soak's history and its check."""
    lin = checked.linearizability if checked is not None else None
    failing = None
    if lin is not None:
        failing = next(iter(lin.illegal or lin.unknown), None)
    verdict = checked.verdict if checked is not None else "not checked"
    ok = verdict == "ok"
    parts = [f"<h1>{_e(title)}</h1>",
             f'<p><span class="verdict{" ok" if ok else ""}">{_e(verdict)}</span> '
             f"{len(events)} ops by {len({e.process for e in events})} processes"
             + (f"; {len(lin.partitions)} partitions checked in {lin.seconds:.2f} s" if lin is not None else "") + "</p>"]
    problems = list(problems)
    if problems:
        parts.append("<h2>Problems</h2><ul class=\"evidence\">" + "".join(f"<li>{_e(p)}</li>" for p in problems) + "</ul>")
    if failing is not None:
        origin = min((o.invoke for o in failing.ops), default=0)
        parts.append(f"<h2>The failing partition: job <span class=\"rule\" id=\"failing-job\">{_e(str(failing.key))}</span>"
                     f" ({_e(failing.verdict)})</h2><p>{_e(failing.reason)}</p><ul class=\"evidence\">"
                     + "".join(f"<li>{_e(describe(o, origin))}</li>" for o in sorted(failing.ops, key=lambda o: o.invoke))
                     + "</ul>")
    if checked is not None and checked.order:
        parts.append("<h2>Claim order</h2><ul class=\"evidence\">"
                     + "".join(f"<li>{_e(str(v))}</li>" for v in checked.order) + "</ul>")
    parts.append("<h2>Timeline</h2><p>a lane per process, a bar per op from invocation to response"
                 + ("; the failing partition's ops in red" if failing is not None else "") + "</p>")
    parts.append(timeline(events, _partition_ops(failing)))
    through, latency = rates(events)
    parts.append("<h2>Throughput and latency</h2>")
    parts.append(_chart(through, "throughput", "ops/s") + " " + _chart(latency, "median latency", "ms"))
    return _page(title, "\n".join(parts))
