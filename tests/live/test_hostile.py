"""Hostile input (specs/lifecycle.md §4, CC-6).

- Every script is called directly (EVALSHA through the connection's ``ScriptSet``,
  bypassing the Python checks) with KEYS and ARGV drawn by Hypothesis: a well-formed call
  with one or more parts spoiled (wrong counts, ids that are not JOB ids, keys of another
  queue, another slot or a forged queue name, numbers that are negative, huge, NaN, inf,
  ``1e3``, not numbers at all, empty or binary, over-long text). The reply must be the
  refusal CC-6 names (``wire_verdict``, an oracle of the wire rules written from
  lifecycle.md §4), and every key of the server must be byte for byte as before (DUMP and
  PTTL), on fakeredis and Valkey.
- The Python API refuses hostile Python values (wrong types, NaN, out of range, ...) with
  the typed error the argument's type names, and sends nothing.
- A queue name is refused exactly when it would not be the hash tag of its keys.

The fixed lists of tests/live/test_scripts.py stay the readable catalogue; this is the search.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import emq_live
from emq_model import branded_id, errors, keyspace, spec
from emq_model.branded_id import MAX_VALUE, encode
from tests.live.test_scripts import KEYS6, SCRIPTS, Q, argv_spec, baseline, clock, populate, row_key
from tests.livekit import J, dump, flush_url, make_backend

HOSTILE = settings(
    max_examples=60,
    deadline=None,
    database=None,
    # Derandomized: the test also asserts which refusal codes a run reached, and a random
    # run of 60 examples may happen to draw no bad id; a fixed search cannot flake.
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.fixture(params=("fakeredis", "valkey"))
def target(request: pytest.FixtureRequest):
    """A live backend holding the populated queue of tests/live/test_scripts.py."""
    b = make_backend(request.param, request)
    populate(b)
    yield b
    b.conn.close()


# -- the wire rules, as an oracle (lifecycle.md CC-1, CC-2, CC-6) ----------------------


def wire(value: Any) -> bytes:
    """What redis-py puts on the wire for an argument."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, float):
        return repr(value).encode()
    return str(value).encode("utf-8", "surrogatepass")


def valid_int(value: bytes, type_name: str) -> bool:
    t = spec.TYPES[type_name]
    lo, hi = spec.bound(t["min"]), spec.bound(t["max"])
    if not value.isdigit() or not value.isascii() or (value.startswith(b"0") and value != b"0"):
        return False
    return len(value) <= len(str(hi)) and lo <= int(value) <= hi


def valid_id(value: bytes) -> bool:
    return value.isascii() and branded_id.is_valid(value.decode(), branded_id.JOB)


def valid_arg(value: bytes, arg: dict[str, Any]) -> bool:
    t = spec.TYPES[arg["type"]]
    if arg.get("optional") and value == b"":
        return True
    if "values" in t:
        return value.decode("latin-1") in t["values"]
    if "min" in t:
        return valid_int(value, arg["type"])
    return "max_bytes" not in t or len(value) <= spec.bound(t["max_bytes"])


def queue_of(pending: bytes) -> bytes | None:
    """The queue name inside ``emq:{q}:pending`` if the scripts allow it (CC-1)."""
    head, tail = b"emq:{", b"}:pending"
    if not (pending.startswith(head) and pending.endswith(tail)) or len(pending) <= len(head) + len(tail):
        return None
    q = pending[len(head) : -len(tail)]
    if len(q) > keyspace.QUEUE_MAX_BYTES or any(b < 0x21 or b in (0x7F, 0x7B, 0x7D) for b in q):
        return None
    return q


def wire_verdict(op: str, keys: list[Any], args: list[Any]) -> str | None:
    """The code a direct call must be refused with (CC-6 order: counts, id, keys, other
    arguments, trailing now), or ``None`` for a well-formed call."""
    keys, args = [wire(k) for k in keys], [wire(a) for a in args]
    argv = argv_spec(op)
    if len(keys) != 6 + row_key(op) or not (len(args) == len(argv) or (clock(op) and len(args) == len(argv) + 1)):
        return errors.ARG
    has_id = bool(argv) and argv[0]["type"] == "job_id"
    if has_id and not valid_id(args[0]):
        return errors.KIND
    q = queue_of(keys[0])
    if q is None:
        return errors.ARG
    prefix = b"emq:{" + q + b"}:"
    if keys[:6] != [prefix + kind.encode() for kind in keyspace.KINDS]:
        return errors.ARG
    if row_key(op) and keys[6] != prefix + b"job:" + args[0]:
        return errors.ARG
    if not all(valid_arg(v, a) for v, a in zip(args[has_id:], argv[has_id:])):
        return errors.ARG
    if len(args) > len(argv) and not valid_int(args[-1], "time"):
        return errors.ARG
    return None


# -- hostile values --------------------------------------------------------------------

NOT_NUMBERS = [b"", b"-1", b"-0", b"+1", b"1.0", b"1.5", b"1e3", b"1E3", b"0x10", b"nan", b"NaN", b"-nan", b"inf",
               b"-inf", b"Infinity", b" 1", b"1 ", b"01", b"00", "١".encode(), b"1\x00", b"\x001", b"\xff", b"1_000"]

huge = st.integers(1, 100_000).map(lambda n: b"9" * n)
anything = st.one_of(st.binary(max_size=40), st.text(max_size=20), huge, st.integers(-(10**30), 10**30),
                     st.floats(allow_nan=True, allow_infinity=True))
numbers = st.one_of(st.sampled_from(NOT_NUMBERS), st.integers(max_value=-1), st.integers(min_value=2**48),
                    st.floats(allow_nan=True, allow_infinity=True), anything)
ids = st.one_of(
    st.sampled_from(["", "JOB", "job00000000001", "JOBzzzzzzzzzzz", "JOBAzL8n0Y58m8", "JOB0000000000!", " JOB0000000001"]),
    st.builds(encode, st.sampled_from(["ORD", "USR", "JOX"]), st.integers(0, MAX_VALUE)),
    st.builds(lambda body: "JOB" + body, st.text(min_size=11, max_size=11)),
    anything,
)
other_queues = st.text(st.characters(categories=["L", "N", "P", "S"], exclude_characters="{}"), min_size=1, max_size=12)
forged_names = st.builds(lambda a, bad, z: a + bad + z, st.text(max_size=5), st.sampled_from(["}", "{", " ", "\t", "\x7f", "\x00", "}{"]),
                         st.text(max_size=5))


def hostile_for(arg: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values of the wire argument ``arg`` that its type refuses."""
    t = spec.TYPES[arg["type"]]
    if arg["type"] == "job_id":
        pool = ids
    elif "min" in t:
        pool = numbers
    elif "values" in t:
        pool = st.one_of(st.sampled_from(["", "IN", "At", "at ", "on", "in\x00"]), anything)
    elif "max_bytes" in t:
        pool = st.integers(spec.bound(t["max_bytes"]) + 1, 100_000).map(lambda n: b"\xff" * n)
    else:
        return st.nothing()  # a payload is any bytes
    return pool.filter(lambda v: not (valid_id(wire(v)) if arg["type"] == "job_id" else valid_arg(wire(v), arg)))


@st.composite
def hostile_key(draw: st.DrawFn, right: str) -> Any:
    """A key in place of ``right``: another queue's, another kind, forged or random."""
    kind = right.split("}:", 1)[1] if "}:" in right else "pending"  # an earlier spoil may have mangled it
    key = draw(st.one_of(
        other_queues.map(lambda q: "emq:{" + q + "}:" + kind),  # another queue (another slot, mostly)
        st.sampled_from(KEYS6 + [f"emq:{{{Q}}}:job:{J(77)}"]),  # the same queue, another key
        forged_names.map(lambda q: "emq:{" + q + "}:" + kind),  # a name that moves the tag
        st.sampled_from(["foo", "{emq}:version", f"{{{Q}}}:pending", f"emq:{Q}:pending", "emq:{}:pending"]),
        anything,
    ))
    assume(wire(key) != right.encode())
    return key


@st.composite
def hostile_call(draw: st.DrawFn, op: str) -> tuple[list[Any], list[Any], list[str]]:
    """A well-formed call of ``op`` (tests/live/test_scripts.py ``baseline``) with at least
    one part spoiled; returns KEYS, ARGV and what was spoiled."""
    keys, args = (list(x) for x in baseline(op))
    argv = argv_spec(op)
    spoils: list[str] = []
    parts = ["keys count", "args count", "key"] + [f"arg {i}" for i, a in enumerate(argv) if a["type"] != "payload"]
    if clock(op):
        parts.append("now")
    for part in draw(st.lists(st.sampled_from(parts), min_size=1, max_size=3, unique=True)):
        if part == "keys count":
            n = draw(st.integers(0, 9).filter(lambda n: n != len(keys)))
            keys = (keys + draw(st.lists(anything, min_size=9, max_size=9)))[:n]
        elif part == "args count":
            allowed = {len(argv), len(argv) + 1} if clock(op) else {len(argv)}
            n = draw(st.integers(0, len(argv) + 3).filter(lambda n: n not in allowed))
            args = (args + draw(st.lists(anything, min_size=len(argv) + 3, max_size=len(argv) + 3)))[:n]
        elif part == "key" and keys:
            i = draw(st.integers(0, len(keys) - 1))
            keys[i] = draw(hostile_key(keys[i] if isinstance(keys[i], str) else KEYS6[0]))
        elif part.startswith("arg ") and int(part[4:]) < len(args):
            i = int(part[4:])
            args[i] = draw(hostile_for(argv[i]))
        elif part == "now" and len(args) > len(argv):
            args[-1] = draw(numbers.filter(lambda v: not valid_int(wire(v), "time")))
        spoils.append(part)
    return keys, args, spoils


@pytest.mark.parametrize("op", SCRIPTS)
def test_a_hostile_direct_call_is_refused_and_changes_nothing(target, op: str) -> None:
    before = dump(target.redis)
    seen: set[str] = set()

    @HOSTILE
    @given(call=hostile_call(op))
    def check(call: tuple[list[Any], list[Any], list[str]]) -> None:
        keys, args, spoils = call
        want = wire_verdict(op, keys, args)
        assume(want is not None)  # the spoils happened to cancel out (or hit nothing)
        with pytest.raises(errors.EmqError) as refused:
            target.conn.scripts.run(target.redis, op, keys, args)
        assert refused.value.code == want, f"{op} {spoils}: KEYS {keys!r} ARGV {args!r}: {refused.value!r}"
        assert dump(target.redis) == before, f"{op} {spoils} changed the keyspace"
        seen.add(want)

    check()
    assert errors.ARG in seen
    if argv_spec(op) and argv_spec(op)[0]["type"] == "job_id":
        assert errors.KIND in seen


def test_the_oracle_accepts_every_baseline_call() -> None:
    """``wire_verdict`` is no blanket refusal: the well-formed calls pass it."""
    for op in SCRIPTS:
        keys, args = baseline(op)
        assert wire_verdict(op, keys, args) is None, op
        if clock(op):
            assert wire_verdict(op, keys, args[:-1]) is None, op


# -- the Python API --------------------------------------------------------------------

wrong_types = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=True, allow_infinity=True),
                        st.text(max_size=5), st.binary(max_size=5), st.lists(st.integers(), max_size=2),
                        st.dictionaries(st.text(max_size=2), st.integers(), max_size=1), st.just(object()))
not_bytes = st.one_of(st.none(), st.integers(), st.floats(allow_nan=True), st.lists(st.binary(), max_size=1))


def bad_value(type_name: str) -> st.SearchStrategy[Any]:
    """Python values the API must refuse for an argument of ``type_name``."""
    t = spec.TYPES[type_name]
    if type_name == "job_id":
        return st.one_of(ids, wrong_types).filter(lambda v: not (isinstance(v, str) and branded_id.is_valid(v, "JOB")))
    if "min" in t:
        lo, hi = spec.bound(t["min"]), spec.bound(t["max"])
        return st.one_of(st.integers(max_value=lo - 1), st.integers(min_value=hi + 1), wrong_types)
    if "max_bytes" in t:
        return st.one_of(st.integers(spec.bound(t["max_bytes"]) + 1, 20_000).map(lambda n: "é" * n), not_bytes)
    return not_bytes  # a payload: any bytes or str, nothing else


GOOD = {"id": J(1), "payload": b"p", "token": 1, "delay_ms": 5, "max_attempts": 3, "error": "e", "lease_ms": 10,
        "limit": 5, "n": 3}


@st.composite
def api_spoil(draw: st.DrawFn, op: str) -> tuple[dict[str, Any], type[errors.EmqError], str]:
    """Good keyword arguments for ``op`` with one made bad, and the error class the bad
    argument's type names."""
    args = spec.OPS[op]["args"]
    kwargs: dict[str, Any] = {a["name"]: GOOD[a["name"]] for a in args if a["name"] in GOOD}
    names = [a["name"] for a in args] + (["now"] if spec.OPS[op]["clock"] else [])
    name = draw(st.sampled_from(names))
    arg = next((a for a in args if a["name"] == name), {"name": "now", "type": "time", "optional": True})
    value = draw(bad_value(arg["type"]))
    if arg.get("optional"):
        assume(value is not None)  # None means "absent" there
    if name == "run_at":
        kwargs.pop("delay_ms")  # schedule takes exactly one of the two
    kwargs[name] = value
    return kwargs, errors.KindError if arg["type"] == "job_id" else errors.ArgError, name


def reads_and_scripts(admin: Any) -> int:
    """How many EVALSHA, ZRANGE and HGETALL the server has run (every way the API talks)."""
    stats = admin.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "zrange", "hgetall"))


@pytest.mark.parametrize("op", [op for op, d in spec.OPS.items() if d["args"] or d["clock"]])
def test_the_api_refuses_hostile_values_with_typed_errors_and_sends_nothing(valkey, op: str) -> None:
    conn = emq_live.connect(flush_url(valkey))
    q = conn.queue("api")
    q.enqueue(J(1), b"p")
    before = dump(conn.redis)
    with valkey.client() as admin:
        sent = reads_and_scripts(admin)

        @HOSTILE
        @given(spoil=api_spoil(op))
        def check(spoil: tuple[dict[str, Any], type[errors.EmqError], str]) -> None:
            kwargs, want, name = spoil
            with pytest.raises(errors.EmqError) as refused:
                getattr(q, op)(**kwargs)
            assert type(refused.value) is want, f"{op}({kwargs!r}) spoiling {name}: {refused.value!r}"
            assert isinstance(refused.value, ValueError)

        check()
        assert reads_and_scripts(admin) == sent, "a refused call reached the server"
    assert dump(conn.redis) == before
    conn.close()


@pytest.fixture(scope="module")
def fake() -> Any:
    with emq_live.connect() as conn:
        yield conn


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(name=st.one_of(st.text(max_size=40), forged_names, st.integers(), st.none(), st.binary(max_size=5)))
def test_a_queue_name_is_refused_exactly_when_it_would_not_be_the_hash_tag(fake, name: Any) -> None:
    """Accepted names are the hash tag of every key of their queue (so all its keys share
    one slot); a name the contract forbids, e.g. one that would close the tag early, is
    refused with ``ArgError`` before any key exists."""
    allowed = isinstance(name, str) and _allowed(name)
    if not allowed:
        with pytest.raises(errors.ArgError):
            fake.queue(name)
        return
    q = fake.queue(name)
    for key in q.keys + [keyspace.job_key(name, J(1))]:
        assert keyspace.hash_tag(key.encode()) == name.encode()
        assert keyspace.slot(key) == keyspace.slot(q.keys[0])


def _allowed(name: str) -> bool:
    """KS-3, restated: 1..128 UTF-8 bytes, no braces, no whitespace, all printable."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return 1 <= size <= keyspace.QUEUE_MAX_BYTES and all(c not in "{}" and not c.isspace() and c.isprintable()
                                                          for c in name)
