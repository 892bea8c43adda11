"""The scripts called directly, as a port or a hand-written client could call them:
wrong KEYS/ARGV counts, malformed ids, non-canonical or out-of-range numbers and keys
that are not the grammar's are refused with the right code, and change nothing (every
key of the server, DUMP + PTTL, is compared before and after). On fakeredis and Valkey.
"""

from __future__ import annotations

from typing import Any

import pytest

from emq_live.scripts import READ_SCRIPTS
from emq_model import errors, keyspace, spec
from emq_model.branded_id import MAX_VALUE, encode
from tests.livekit import J, dump

Q = "d"
NOW = "1000"
MS_MAX = spec.LIMITS["ms_max"]
KEYS6 = keyspace.queue_keys(Q)
MAX_ID = encode("JOB", MAX_VALUE)

BAD_NUMBERS = ["-1", "1.5", "01", "00", " 1", "1 ", "+1", "1e3", "0x10", "١", "inf", "nan",
               "99999999999999999999999999", "abc", "1\x00"]
BAD_IDS = ["", "JOB", "job00000000001", "ORD00000000001", "JOBzzzzzzzzzzz", "JOBAzL8n0Y58m8",
           "JOBa0000000000", "JOBB0000000000", "JOB0000000000!", "JOB000000000001", "JOB0000000000",
           "JOB 0000000001", "JÖB0000000001"]


def row(job_id: str, queue: str = Q) -> str:
    """A row key composed without the gate, so malformed ids can be sent."""
    return f"emq:{{{queue}}}:job:{job_id}"


def baseline(op: str) -> tuple[list[str], list[str]]:
    """A well-formed call of ``op`` on the populated queue (J1 active token 1, J2
    pending, J3 dead, J4 scheduled)."""
    calls: dict[str, tuple[list[str], list[str]]] = {
        "enqueue": ([*KEYS6, row(J(99))], [J(99), "p"]),
        "schedule": ([*KEYS6, row(J(99))], [J(99), "p", "in", "5", NOW]),
        "claim": (KEYS6, ["10", NOW]),
        "complete": ([*KEYS6, row(J(1))], [J(1), "1"]),
        "retry": ([*KEYS6, row(J(1))], [J(1), "1", "5", "3", "err", NOW]),
        "extend": ([*KEYS6, row(J(1))], [J(1), "1", "10", NOW]),
        "promote": (KEYS6, ["10", NOW]),
        "reap": (KEYS6, ["10", "", NOW]),
        "reprocess": ([*KEYS6, row(J(3))], [J(3)]),
        "remove": ([*KEYS6, row(J(2))], [J(2)]),
        "counts": (KEYS6, []),
        "state": ([*KEYS6, row(J(1))], [J(1)]),
        "snapshot": (KEYS6, []),
    }
    return calls[op]


SCRIPTS = tuple(spec.TRANSITIONS) + READ_SCRIPTS


def argv_spec(op: str) -> list[dict[str, Any]]:
    return [] if op == "snapshot" else spec.OPS[op]["argv"]


def clock(op: str) -> bool:
    return op != "snapshot" and spec.OPS[op]["clock"]


def row_key(op: str) -> bool:
    return op != "snapshot" and spec.OPS[op]["row_key"]


def bad_calls(op: str) -> list[tuple[str, type[errors.EmqError], list[str], list[str]]]:
    """(what, expected error, KEYS, ARGV) for every malformed call of ``op`` we try."""
    keys, args = baseline(op)
    out: list[tuple[str, type[errors.EmqError], list[str], list[str]]] = []
    add = out.append
    plain = args[:-1] if clock(op) else args  # without the trailing now
    # counts
    add(("one key short", errors.ArgError, keys[:-1], args))
    add(("one key too many", errors.ArgError, keys + [keys[0]], args))
    add(("no keys", errors.ArgError, [], args))
    if plain:
        add(("one argument short", errors.ArgError, keys, plain[:-1]))
    add(("arguments too many", errors.ArgError, keys, plain + ["1", "1"] if clock(op) else plain + ["1"]))
    # ids (checked first: a bad id with bad keys or numbers is EMQKIND)
    argv = argv_spec(op)
    if argv and argv[0]["type"] == "job_id":
        for bad in BAD_IDS:
            add((f"id {bad!r}", errors.KindError, keys[:6] + [row(bad)], [bad] + args[1:]))
        add(("bad id and bad keys", errors.KindError, keys[:6] + [row(J(77))], ["JOB"] + args[1:]))
        add(("bad id and foreign keys", errors.KindError, keyspace.queue_keys("x") + [row("JOB")], ["JOB"] + args[1:]))
        add(("row key of another id", errors.ArgError, keys[:6] + [row(J(77))], args))
        add(("row key of another queue", errors.ArgError, keys[:6] + [row(args[0], "x")], args))
        add(("row key without its id", errors.ArgError, keys[:6] + [row("")], args))
    # keys of another queue, or not of the grammar
    other = keyspace.queue_keys("x")
    for i in range(6):
        mixed = list(keys)
        mixed[i] = other[i]
        add((f"KEYS[{i + 1}] of another queue", errors.ArgError, mixed, args))
    for name in ["a}b", "", "a b", "a\x7fb", "a{b", "a\tb", "x" * 129]:
        forged = [f"emq:{{{name}}}:{kind}" for kind in keyspace.KINDS]
        if row_key(op):
            forged.append(f"emq:{{{name}}}:job:{args[0]}")
        add((f"queue name {name!r}", errors.ArgError, forged, args))
    swapped = list(keys)
    swapped[0], swapped[1] = swapped[1], swapped[0]
    add(("pending and active swapped", errors.ArgError, swapped, args))
    add(("a key not of the grammar", errors.ArgError, ["foo"] + keys[1:], args))
    # numbers and other argument types
    for i, a in enumerate(argv):
        t = spec.TYPES[a["type"]]
        if "min" in t:
            lo, hi = spec.bound(t["min"]), spec.bound(t["max"])
            bads = BAD_NUMBERS + [str(hi + 1)] + ([str(lo - 1)] if lo > 0 else [])
            if not a.get("optional"):
                bads.append("")
            for bad in bads:
                changed = list(args)
                changed[i] = bad
                add((f"{a['name']} {bad!r}", errors.ArgError, keys, changed))
        if "values" in t:
            for bad in ["IN", "", "at ", "on"]:
                changed = list(args)
                changed[i] = bad
                add((f"{a['name']} {bad!r}", errors.ArgError, keys, changed))
        if "max_bytes" in t:
            changed = list(args)
            changed[i] = "x" * (spec.bound(t["max_bytes"]) + 1)
            add((f"{a['name']} too long", errors.ArgError, keys, changed))
    if clock(op):
        for bad in BAD_NUMBERS + ["", str(MS_MAX + 1)]:
            add((f"now {bad!r}", errors.ArgError, keys, plain + [bad]))
    return out


def populate(live) -> None:
    """J1 active (token 1), J2 pending (attempts 1), J3 dead, J4 scheduled; a job of
    queue x."""
    q = live.conn.queue(Q)
    for n in (1, 2, 3):
        q.enqueue(J(n), b"p")
    for n in (1, 2, 3):
        assert q.claim(100, now=0).id == J(n)
    q.retry(J(3), 1, delay_ms=0, max_attempts=1, error="x", now=0)
    q.retry(J(2), 1, delay_ms=0, max_attempts=1, error="x", now=0)
    q.reprocess(J(2))
    q.schedule(J(4), b"s", run_at=1_000_000, now=0)
    live.conn.queue("x").enqueue(J(5), b"other queue")
    assert q.counts() == {"pending": 1, "active": 1, "schedule": 1, "dead": 1}


def run(live, op: str, keys: list[str], args: list[Any]) -> Any:
    return live.conn.scripts.run(live.redis, op, keys, args)


@pytest.mark.parametrize("op", SCRIPTS)
def test_malformed_calls_are_refused_and_change_nothing(live, op: str) -> None:
    populate(live)
    before = dump(live.redis)
    cases = bad_calls(op)
    assert len(cases) > 15
    for what, code, keys, args in cases:
        with pytest.raises(errors.EmqError) as info:
            run(live, op, keys, args)
        assert type(info.value) is code, f"{op}: {what}: got {info.value!r}"
        assert dump(live.redis) == before, f"{op}: {what} changed the keyspace"


@pytest.mark.parametrize("op", SCRIPTS)
def test_the_baseline_call_is_accepted(live, op: str) -> None:
    populate(live)
    keys, args = baseline(op)
    run(live, op, keys, args)
    if clock(op):
        live.redis.flushdb()
        populate(live)
        run(live, op, keys, args[:-1])  # the server clock


def test_boundary_values_are_accepted(live) -> None:
    populate(live)
    assert run(live, "enqueue", [*KEYS6, row(MAX_ID)], [MAX_ID, ""]) == b"enqueued"
    zero = encode("JOB", 0)
    assert run(live, "schedule", [*KEYS6, row(zero)], [zero, "", "at", str(MS_MAX), "0"]) == b"scheduled"
    assert run(live, "claim", KEYS6, [str(MS_MAX), str(MS_MAX)])[:2] == [b"job", J(2).encode()]
    assert run(live, "promote", KEYS6, [str(spec.LIMITS["limit_max"]), "0"]) == 0
    big = spec.LIMITS["token_max"]
    text = "é" * (spec.LIMITS["text_max"] // 2)  # exactly text_max bytes
    assert run(live, "retry", [*KEYS6, row(J(2))], [J(2), "2", "0", str(big), text, "0"]) == b"scheduled"
    assert live.conn.queue(Q).job(J(2))["last_error"] == text.encode()
    assert run(live, "reap", KEYS6, ["1", str(big), "0"]) == 0


def test_check_order_counts_then_id_then_keys_then_arguments(live) -> None:
    keys, args = baseline("retry")
    with pytest.raises(errors.ArgError):  # a wrong count comes before the id
        run(live, "retry", keys[:6], ["JOB"] + args[1:])
    with pytest.raises(errors.KindError):  # the id before the keys and the numbers
        run(live, "retry", ["foo"] * 7, ["JOB", "-1", "x", "0", "", "nan"])
    with pytest.raises(errors.ArgError) as info:  # then the arguments in table order
        run(live, "retry", keys, [J(1), "0", "-1", "0", "", "nan"])
    assert "token" in str(info.value)


def test_claim_reply_lists_dropped_orphans(live) -> None:
    q = live.conn.queue(Q)
    for n in (1, 2, 3):
        q.enqueue(J(n), b"p%d" % n)
    live.redis.delete(keyspace.job_key(Q, J(1)), keyspace.job_key(Q, J(3)))
    assert run(live, "claim", KEYS6, ["5", "0"]) == [b"job", J(2).encode(), b"p2", 1, J(1).encode()]
    assert run(live, "claim", KEYS6, ["5", "0"]) == [b"empty", J(3).encode()]
    assert run(live, "claim", KEYS6, ["5", "0"]) == [b"empty"]
    assert not live.redis.exists(keyspace.job_key(Q, J(1)), keyspace.job_key(Q, J(3)))


def test_snapshot_reports_stray_keys_and_wrong_types(live) -> None:
    q = live.conn.queue("s*[x]")
    q.enqueue(J(1), b"")
    r = live.redis
    r.set("emq:{s*[x]}:junk", "1")
    r.set("emq:{s*[x]}:job:" + J(2), "a string, not a row")
    r.set("emq:{s*[x]}:metrics:completed", "7")  # wrong type
    r.set("emq:{sa[x]}:junk", "another queue that the unescaped glob would match")
    r.hset("emq:{s*[x]}:metrics:failed", mapping={"count": "2", "extra": "1"})
    snap = q.snapshot()
    assert snap.stray == tuple(sorted([
        "emq:{s*[x]}:junk", "emq:{s*[x]}:job:" + J(2), "emq:{s*[x]}:metrics:completed", "emq:{s*[x]}:metrics:failed",
    ]))
    assert snap.failed == 2 and snap.completed == 0 and [i for i, _ in snap.rows] == [J(1)]


def test_id_overflow_check_ignores_the_servers_collation(tmp_path, monkeypatch) -> None:
    """Valkey collates Lua strings with strcoll under its locale (it calls setlocale with
    LC_COLLATE from the environment). Under en_US.UTF-8 ``"a0" < "Az"`` holds, so an
    overflow check written with Lua's ``<`` would accept ``JOBa0000000000`` (> 2^63-1).
    lib.lua compares bytes: the id is refused on that server too."""
    import shutil
    import subprocess

    import redis

    import emq_live
    from emq_kit.server import ServerProcess

    if shutil.which("localedef") is None:
        pytest.skip("localedef is not installed: no en_US.UTF-8 locale can be built")
    locales = tmp_path / "locales"
    locales.mkdir()
    built = subprocess.run(["localedef", "-i", "en_US", "-f", "UTF-8", str(locales / "en_US.UTF-8")],
                           capture_output=True)
    if not (locales / "en_US.UTF-8").is_dir():
        pytest.skip(f"en_US.UTF-8 could not be built: {built.stderr[-200:]!r}")
    monkeypatch.setenv("LOCPATH", str(locales))
    monkeypatch.setenv("LC_ALL", "en_US.UTF-8")
    with ServerProcess() as server:
        with redis.Redis.from_url(server.url) as r:
            assert r.eval('return ("a0" < "Az") and 1 or 0', 0) == 1  # the collation is in force
        with emq_live.connect(server.url) as conn:
            for bad in ("JOBa0000000000", "JOBB0000000000", "JOBAzL8n0Y58m8"):
                with pytest.raises(errors.KindError):
                    conn.scripts.run(conn.redis, "enqueue", [*KEYS6, row(bad)], [bad, ""])
            assert conn.scripts.run(conn.redis, "enqueue", [*KEYS6, row(MAX_ID)], [MAX_ID, ""]) == b"enqueued"
            assert conn.queue(Q).snapshot().rows[0][0] == MAX_ID


def test_no_script_spells_a_refusal_code() -> None:
    """Every code comes from the generated prelude (``emq.code``, from emq_model/errors.py):
    a script that typed one could drift from the contract unseen."""
    import re
    from importlib import resources

    from emq_live.scripts import prelude

    for entry in resources.files("emq_live").joinpath("lua").iterdir():
        code = [line for line in entry.read_text("utf-8").split("\n") if not line.strip().startswith("--")]
        assert not re.search(r"EMQ[A-Z]", "\n".join(code)), entry.name
    table = prelude()
    assert all(f'"{c}"' in table for c in errors.CODES if c != errors.VERSION)
