"""``emq audit``: a read-only check of a live deployment's keyspace (emq_kit.audit);
exit 0 clean, 1 violations, 2 the deployment could not be read (an ``AuditError`` is a
``KitError``: one line)."""

from __future__ import annotations

from typing import Any

from emq_kit import interrupts
from emq_kit.audit import BATCH, KEEP, Progress, audit
from emq_kit.cli.common import EXIT_FAIL, EXIT_OK, Outputs, Usage, add_outputs, bounded, within
from emq_kit.cli.progress import Meter
from emq_kit.layouts import NAMES, layout
from emq_kit.report.document import audit_document, printable
from emq_kit.report.verdicts import headline
from emq_model import errors
from emq_model.invariants import Violation


def register(sub: Any) -> None:
    """Add ``emq audit`` to the command line."""
    c = sub.add_parser("audit", help="read-only check of a live deployment's keyspace: counts, invariant violations")
    c.add_argument("--url", dest="url_flag", metavar="URL",
                   help="the deployment (redis://, valkey://, redis+cluster:// ...), as every command takes it")
    c.add_argument("url", nargs="?", help="the same URL given positionally (kept for existing scripts)")
    c.add_argument("--queue", action="append", default=[], help="a queue to audit (repeatable); default: every queue found")
    c.add_argument("--batch", type=bounded("audit --batch"),
                   help=f"ids per SCAN page and judged batch (default {BATCH}; {within('audit --batch')})")
    c.add_argument("--keep", type=bounded("audit --keep"),
                   help=f"violations listed at most; all are counted (default {KEEP}; {within('audit --keep')})")
    c.add_argument("--quiet", action="store_true", help="no progress on stderr")
    c.add_argument("--layout", choices=NAMES, default="echomq",
                   help="the keyspace layout: echomq (default) or bullmq (the queue emq:{q}: of "
                   "specs/layouts/bullmq.md: location sizes and BQ-INV-1..4)")
    add_outputs(c)
    c.set_defaults(func=cmd_audit)


def cmd_audit(args: Any) -> int:
    """Print each queue's counts and each violation; exit 0 clean, 1 violations, 2 the
    deployment could not be read."""
    if (args.url_flag is None) == (args.url is None):
        raise Usage("give the deployment once: --url URL (or the URL alone, as before)")
    args.url = args.url_flag or args.url
    out = Outputs(args)

    meter = Meter("audit")

    def progress(p: Progress) -> None:
        meter.show("discovering queues" if p.stage == "discover" else "auditing", p.done, p.total,
                   printable(f"{p.queue or '*'} {p.stage}"))

    def violation(queue: str, v: Violation) -> None:
        meter.end()  # a live line ends before the violation's
        out.say(printable(f"{queue}: {v}"))

    chosen = layout(args.layout)
    given = [flag for flag, value in (("--queue", args.queue or None), ("--batch", args.batch), ("--keep", args.keep))
             if value is not None]
    if chosen.audit is not None and given:
        raise Usage(f"{', '.join(given)}: the echomq layout's; the {chosen.name} layout's audit reads its one queue "
                    "whole")
    if chosen.audit is not None:
        if out.report is not None or out.json:  # its census has no body in the report schema yet
            raise Usage(f"--report and --json are not available with --layout {chosen.name}")
        counts, found = chosen.audit(args.url)
        interrupts.decided()  # the last stopping point: from here the verdict stands (INT-3)
        for line in found:
            print(printable(line))
        print(" ".join(f"{loc}={n}" for loc, n in counts.items()))
        word = "violations" if found else "clean" if any(counts.values()) else "empty"
        print(f"{headline('audit', word)}  {chosen.name} layout, {len(found)} violation(s)")
        return EXIT_FAIL if found else EXIT_OK
    try:
        result = audit(args.url, args.queue, batch=BATCH if args.batch is None else args.batch,
                       keep=KEEP if args.keep is None else args.keep,
                       progress=None if args.quiet else progress, on_violation=violation)
    except errors.ArgError as exc:
        raise Usage(str(exc)) from None
    finally:
        meter.end()
    interrupts.decided()  # the last stopping point: from here the verdict stands (INT-3)
    for q in result.queues:
        shown = " ".join(f"{loc}={n}" for loc, n in q.counts.items())
        lanes = f" lanes={q.lanes}" if q.lanes else ""
        out.say(printable(f"{q.queue}: {shown}{lanes} rows={q.rows} completed={q.completed} failed={q.failed} "
                          f"stray={q.stray}" + (" (holds no key: nothing judged)" if q.empty else "")))
    out.say(f"{headline('audit', result.detail)}  {len(result.queues)} queue(s), {result.total} violation(s)")
    code = EXIT_OK if result.clean else EXIT_FAIL
    out.emit(lambda started, finished: audit_document(result, target=args.url, exit=code, started=started,
                                                      finished=finished))
    return code
