"""``emq campaign``: a plan (a TOML file and/or flags) run on a Dask cluster, its
progress on stderr and its one report (the campaign itself is
``emq_kit.campaign.campaign``; specs/campaign.md)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from emq_kit import interrupts
from emq_kit.bounds import CLUSTER
from emq_kit.campaign import plan as plans
from emq_kit.campaign.campaign import RETRIES, Progress, run_campaign
from emq_kit.campaign.cluster import DEFAULT, ClusterSpec, cluster_of, dashboard
from emq_kit.check.profiles import PROFILES
from emq_kit.cli.common import Outputs, add_number, add_outputs, bounded, sizes, within
from emq_kit.cli.progress import Meter
from emq_kit.errors import BadArgument
from emq_kit.report.verdicts import headline, words


def cluster_type(text: str) -> ClusterSpec:
    """An argparse type: ``--cluster``'s value (one line naming the problem)."""
    try:
        return cluster_of(text)
    except BadArgument as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None


def add_cluster(p: argparse.ArgumentParser, default: str | None) -> None:
    """``--cluster``, as ``emq campaign`` (default ``local:2``) and ``emq selftest``
    (default: none, the mutants one after another here) take it."""
    p.add_argument("--cluster", type=cluster_type, metavar="local:N|tcp://HOST:PORT",
                   default=None if default is None else cluster_of(default),
                   help="run on Dask: local:N starts N worker processes here (N: "
                        f"{CLUSTER.text()}), tcp://HOST:8786 uses a running dask scheduler "
                        f"(docs/campaigns.md; needs emq[campaign]; default {default or 'none'})")


def summary(document: dict[str, Any]) -> list[str]:
    """The campaign's report as ``emq campaign`` prints it."""
    body, f = document["campaign"], document["figures"]
    lines = [f"{headline('campaign', document['detail'])}  {f['runs']:.0f} runs, {f['judged']:.0f} judged, "
             f"{f['environment']:.0f} without a verdict (environment), {f['errors']:.0f} refused, "
             f"{f['retried']:.0f} retried; {f['differences']:.0f} distinct differences; {f['seconds']:.1f} s"]
    for run in body["runs"]:
        said = words("check", run["detail"]) if run["status"] == "verdict" else f"{run['status']}: {run['error']}"
        again = f" (attempts {run['attempts']}: {', '.join(run['workers'])})" if run["attempts"] > 1 else ""
        lines.append(f"  {run['id']}: {said}{again}")
    for d in body["differences"]:
        sig = f"{d['signature']['cell'] or '-'} {d['signature']['rule']}"
        lines.append(f"  difference {sig} [{d['class']}] found by {len(d['runs'])} run(s): {', '.join(d['runs'])}")
        if d["replay"]:
            lines.append(f"    {d['replay']}")
    for name, c in body["coverage"].items():
        lines.append(f"  coverage {name}: {c['reached']}/{c['total']} cells reached by its runs together")
    return lines


def cmd_campaign(args: argparse.Namespace) -> int:
    """``emq campaign``: the plan and every output checked first, then the runs."""
    data = plans.load(args.plan) if args.plan else {}
    plan = plans.plan_of(data, [plans.target_of(t) for t in args.target], seeds=args.seeds, profiles=args.profile,
                         clocks=args.clock, examples=args.examples, steps=args.steps)
    total = len(plan.runs())  # a malformed plan is refused before any output or the cluster is touched (CMP-1)
    out = Outputs(args)
    meter = Meter("campaign")  # the runs done of the plan's, with an ETA (every long command's meter)

    done = [0]  # the runs judged so far: what an interrupt says

    def line(p: Progress) -> None:
        done[0] = p.done
        meter.show("running", p.done, p.total, f"differences {p.differences}")

    def connected(client: Any) -> None:
        link = dashboard(client)
        if link:
            print(f"emq campaign: Dask dashboard {link}", file=sys.stderr)

    try:
        document = run_campaign(plan, args.cluster, Path(args.out),
                                corpus=None if args.corpus is None else Path(args.corpus), retries=args.retries,
                                progress=line, connected=connected)
    except KeyboardInterrupt:
        meter.end()
        interrupts.handled()
        print(f"emq campaign: interrupted after {done[0]} of {total} runs (run it again: "
              f"{shlex.join(again(args))})", file=sys.stderr)
        raise interrupts.Interrupted(said=True) from None
    finally:
        meter.end()
    interrupts.decided()  # the last stopping point: from here the verdict stands (INT-3)
    out.say("\n".join(summary(document)))
    out.emit(lambda started, finished: document)
    return int(document["exit"])


def again(args: argparse.Namespace) -> list[str]:
    """The command that runs the same campaign again (INT-2): every option that chose
    what ran, where, and where its outputs go; a URL's password masked."""
    from emq_live.urls import redact

    out = ["emq", "campaign", *([args.plan] if args.plan else [])]
    out += [part for t in args.target for part in ("--target", redact(t))]
    if args.seeds:
        out += ["--seeds", ",".join(str(seed) for seed in args.seeds)]
    out += [part for flag in ("profile", "clock") for value in getattr(args, flag) or () for part in (f"--{flag}", value)]
    out += [part for flag in ("examples", "steps") if getattr(args, flag) is not None
            for part in (f"--{flag}", str(getattr(args, flag)))]
    if args.retries != RETRIES:
        out += ["--retries", str(args.retries)]
    out += ["--cluster", args.cluster.text, "--out", args.out, *(["--corpus", args.corpus] if args.corpus else [])]
    return out


def register(sub: Any) -> None:
    """Add ``emq campaign`` to the command line."""
    c = sub.add_parser("campaign", help="run a plan of checks (targets x seeds x profiles x clocks) on Dask")
    c.add_argument("plan", nargs="?", metavar="PLAN.toml",
                   help="the plan (specs/schemas/plan.json); flags given as well replace its values")
    c.add_argument("--target", action="append", default=[], metavar="[NAME=]SPEC",
                   help="a target, once per target: fakeredis, a server's URL or driver:CMD (default fakeredis)")
    add_number(c, "campaign", "--seeds", "the seeds, comma-separated (default 0)", kind=sizes)
    c.add_argument("--profile", action="append", choices=sorted(PROFILES),
                   help="a profile, once per profile (default dev)")
    c.add_argument("--clock", action="append", choices=["virtual", "server"],
                   help="a clock mode, once per mode (default virtual; server needs a server)")
    add_number(c, "campaign", "--examples", "examples per round of every run (default: the profile's)")
    add_number(c, "campaign", "--steps", "steps per example of every run (default: the profile's)")
    c.add_argument("--retries", type=bounded("campaign --retries"), default=RETRIES,
                   help=f"attempts after the first of a run whose environment failed (default {RETRIES}; "
                        f"{within('campaign --retries')})")
    add_cluster(c, DEFAULT)
    c.add_argument("--out", metavar="DIR", default=".emq/campaign",
                   help="where each run's report and traces go (default .emq/campaign)")
    c.add_argument("--corpus", metavar="DIR", help="the shared trace corpus (default OUT/corpus): what later runs "
                   "of a target replay first")
    add_outputs(c)
    c.set_defaults(func=cmd_campaign)
