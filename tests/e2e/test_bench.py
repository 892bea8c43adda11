"""``emq bench`` runs end to end with tiny sizes and reports every figure with a sane
value (structure and sanity only: timings are never asserted), and it refuses to report
figures of a queue that answers wrongly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from emq_kit import bench, cli
from emq_kit.check.live import LiveTarget
from emq_kit.check.profiles import PROFILES
from emq_kit.errors import BadArgument
from emq_kit.figures import AT_MOST, GOAL_RATIOS, GOALS, QUEUE

TINY = ["--repeat", "1", "--examples", "2", "--steps", "5", "--depth", "40", "--depth-examples", "1", "--jobs", "200",
        "--single-jobs", "30", "--batch", "20", "--sizes", "10,100", "--lanes", "3,30", "--fakeredis-sizes", "10,40",
        "--probes", "5", "--audit-jobs", "30", "--shrink-mutants", "2", "--shrink-budget", "10"]


@pytest.mark.parametrize("where", ["throwaway", "url"])
def test_emq_bench_reports_every_figure(where: str, request: pytest.FixtureRequest, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Without --url on its own valkey-server; with --url on a database other than 0, which
    valkey-cli and valkey-benchmark must address too (the replay checks its effect). The
    coverage figure (a whole ci run a seed) is measured in one of the two, left out by
    ``--coverage-seeds 0`` in the other."""
    out = tmp_path / "bench.json"
    url = ["--url", request.getfixturevalue("valkey").url + "/5"] if where == "url" else []
    seeds = ["--coverage-seeds", "0" if where == "url" else "1"]
    assert cli.main(["bench", *TINY, *url, *seeds, "--report", str(out)]) == cli.EXIT_OK
    data = json.loads(out.read_text())["bench"]
    assert data["machine"]["nproc"] >= 1 and data["machine"]["cpu"]
    assert data["versions"]["server"].startswith("valkey ") and data["versions"]["python"]
    assert data["params"]["sizes"] == [10, 100] and data["params"]["batch"] == 20
    figures = {f["key"]: f for f in data["figures"]}
    want = {"model", "rtt.fakeredis", "rtt.valkey", "hypothesis.floor", "check.model", "check.fakeredis", "check.valkey",
            "check.valkey.server_clock", "check.node.valkey", "check.valkey.depth", "check.valkey.depth.fill",
            "check.valkey.depth.end",
            "lifecycle.fakeredis.single", "lifecycle.fakeredis.batched", "lifecycle.valkey.single",
            "lifecycle.valkey.batched", "lifecycle.valkey.claim_many"}
    for label, sizes in (("valkey", (10, 100)), ("fakeredis", (10, 40))):
        want |= {f"scale.{label}.{what}.{n}" for what in ("claim", "complete", "memory") for n in sizes}
        want |= {f"scale.{label}.claim.growth", f"scale.{label}.complete.growth"}
    want |= {f"lanes.valkey.{op}.{n}" for op in ("claim", "enqueue") for n in (3, 30)}
    want |= {"lanes.valkey.claim.growth", "lanes.valkey.enqueue.growth"}
    want |= {"audit.valkey.seconds.30", "audit.valkey.memory.30"}
    want |= {"check.driver.model", "foreign.full_report", "shrink.fakeredis.median", "shrink.fakeredis.max"}
    assert figures["shrink.fakeredis.median"]["value"] <= figures["shrink.fakeredis.max"]["value"]
    if where != "url":
        want.add("coverage.ci.examples")
        examples, nominal = figures["coverage.ci.examples"]["value"], PROFILES["ci"]
        assert nominal.examples <= examples <= nominal.examples + nominal.extra_examples
        assert f"seed 1: {examples}" in figures["coverage.ci.examples"]["note"]
    # 2 examples of 5 steps may meet none of the foreign port's differences: then no first one
    assert set(figures) - {"foreign.first_difference"} == want
    if "foreign.first_difference" in figures:
        assert figures["foreign.first_difference"]["value"] <= figures["foreign.full_report"]["value"]
    for key, f in figures.items():
        assert math.isfinite(f["value"]), key
        if ".memory." not in key:  # memory can shrink as the allocator settles; a rate cannot
            assert f["value"] > 0, key
        if f["ceiling"] is not None:
            assert f["ceiling"] > 0 and f["ceiling_by"], key
            assert f["ratio"] == pytest.approx(f["value"] / f["ceiling"]), key
    with_ceiling = {k for k, f in figures.items() if f["ceiling"] is not None}
    assert with_ceiling == {"rtt.valkey", "check.model", "check.fakeredis", "check.valkey", "check.valkey.server_clock",
                            "check.valkey.depth",
                            "check.node.valkey", "check.driver.model", "lifecycle.valkey.single",
                            "lifecycle.valkey.batched", "lifecycle.valkey.claim_many"}
    assert {k for k, f in figures.items() if f["goal"]} == set(GOALS) & set(figures)
    for f in figures.values():  # met: the ratio's goal when there is one, else the value's, a ceiling in AT_MOST
        goal, ratio_goal = f["goal"], f["goal_ratio"]
        assert f["met"] == (f["ratio"] >= ratio_goal if ratio_goal else None if goal is None else
                            f["value"] <= goal if f["key"] in AT_MOST else f["value"] >= goal), f["key"]
    assert {k: f["goal_ratio"] for k, f in figures.items() if f["goal_ratio"]} == GOAL_RATIOS
    table = capsys.readouterr().out
    assert all(key in table for key in figures) and "ceiling" in table and "valkey" in table


def test_a_wrong_answer_stops_the_measurement() -> None:
    target = LiveTarget(None)
    q = bench.fresh(target)
    ids = bench.Ids().take(3)
    q.enqueue(ids[1], b"already there")  # so the lifecycle meets a duplicate
    with pytest.raises(bench.Wrong, match="enqueue"):
        bench.lifecycle_single(q, ids)
    q = bench.fresh(target)
    q.enqueue(ids[2], b"already there")
    with pytest.raises(bench.Wrong, match="enqueue_many"):
        bench.lifecycle_batched(q, ids, 2)
    target.close()


def test_the_replayed_stream_is_what_a_client_sends() -> None:
    assert bench.resp("EVALSHA", "ab", 2, b"k\r\n", "") == b"*5\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n2\r\n$3\r\nk\r\n\r\n$0\r\n\r\n"
    assert bench.server_args("redis://127.0.0.1:7001/3") == ["-h", "127.0.0.1", "-p", "7001", "-n", "3"]
    assert bench.server_args("redis://127.0.0.1:7001/3", "--dbnum")[-2:] == ["--dbnum", "3"]
    assert bench.server_args("redis://127.0.0.1:7001/0") == ["-h", "127.0.0.1", "-p", "7001"]
    assert bench.server_args("valkey://me:s%40cret@h:1") == ["-h", "h", "-p", "1", "--user", "me"]  # no password (SEC-1)
    assert bench.server_args("unix:///tmp/v.sock") == ["-s", "/tmp/v.sock"]
    with pytest.raises(BadArgument):
        bench.server_args("redis+cluster://127.0.0.1:7000")


def test_the_live_figures_call_the_client_as_an_application_does() -> None:
    """Not through ``emq check``'s observed queues, which read the whole snapshot after
    every call (at 10^5 pending jobs that is most of a claim's time)."""
    from emq_kit.check.live import ObservedQueue

    target = bench.live(None)
    try:
        assert not isinstance(target.queue(QUEUE), ObservedQueue)
    finally:
        target.close()
