"""Branded ids (protocol §2): the vectors of specs/vectors/branded_ids.json, one case each,
and properties of encode/parse, the placement hash and the minter.

Expected values come from the vectors or from independent reference code in this file
(base-62 by hand, the hash formula as the spec writes it); never from the module under test.
"""

from __future__ import annotations

import json
import re
import threading
from datetime import datetime, timezone

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from emq_model import branded_id as bid
from emq_model.errors import ArgError, EmqError, KindError
from emq_model.spec import text

V = json.loads(text("vectors/branded_ids.json"))

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
MAX = 2**63 - 1
EPOCH = 1704067200000
SHAPE = re.compile(r"\A[A-Z]{3}[0-9A-Za-z]{11}\Z")  # ASCII-only classes; \Z: no newline slack
FAST = settings(max_examples=200, deadline=None)


def case(vectors: list[dict], key: str = "id") -> list:
    return [pytest.param(v, id=repr(v[key])[:40]) for v in vectors]


def ref_value(body: str) -> int:
    n = 0
    for c in body:
        n = n * 62 + ALPHABET.index(c)
    return n


def ref_body(n: int) -> str:
    digits = []
    for _ in range(11):
        n, r = divmod(n, 62)
        digits.append(ALPHABET[r])
    assert n == 0
    return "".join(reversed(digits))


def ref_hash32(n: int) -> int:
    """protocol §2, literally."""
    h = n
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) % 2**64
    h ^= h >> 33
    return h % 2**32


def ref_valid(s: str) -> bool:
    """The contract's acceptance rule, written without a regex."""
    return (
        len(s) == 14
        and all(c in UPPER for c in s[:3])
        and all(c in ALPHABET for c in s[3:])
        and ref_value(s[3:]) <= MAX
    )


def fields(n: int) -> tuple[int, int, int]:
    """(unix ms, node, seq) of a snowflake."""
    return (n >> 22) + EPOCH, (n >> 12) & 0x3FF, n & 0xFFF


# --------------------------------------------------------------------------- the file


def test_vector_file_header():
    assert V["version"] == 1
    assert V["alphabet"] == ALPHABET == bid.ALPHABET
    assert V["max"] == str(MAX) and bid.MAX_VALUE == MAX
    assert V["epoch_ms"] == EPOCH == bid.EPOCH_MS
    assert V["shape"] == "^[A-Z]{3}[0-9A-Za-z]{11}$"
    assert list(ALPHABET) == sorted(ALPHABET)  # the alphabet is in ASCII order


def test_contract_vectors_present():
    """The five vectors of protocol §2 are in the file, exactly."""
    enc = {(v["ns"], v["n"]): v["id"] for v in V["encode"]}
    assert enc[("USR", "274557032793636864")] == "USR0KHTOWnGLuC"
    assert enc[("JOB", "12345678901234")][3:] == "0003VLrOWLi"
    assert enc[("JOB", str(MAX))][3:] == "AzL8n0Y58m7"
    assert {"id": "USR0NgWEfAEJfs", "ns": "USR", "n": "320636799581945856"}.items() <= V["parse"][0].items()
    assert "USRzzzzzzzzzzz" in {v["id"] for v in V["refuse_parse"]}
    assert "JOBAzL8n0Y58m8" in {v["id"] for v in V["refuse_parse"]}
    assert {"n": "274557032793636864", "h": 234878118} in V["hash32"]
    assert {"0", "1", str(MAX)} <= {v["n"] for v in V["hash32"]}


def test_vector_values_are_canonical_decimal():
    for group in ("encode", "parse", "refuse_job", "hash32", "snowflake"):
        for v in V[group]:
            assert re.fullmatch(r"0|[1-9][0-9]*", v["n"]), (group, v)


# --------------------------------------------------------------------------- vectors


@pytest.mark.parametrize("v", case(V["encode"]))
def test_encode_vector(v):
    n = int(v["n"])
    assert bid.encode(v["ns"], n) == v["id"]
    assert bid.parse(v["id"]) == (v["ns"], n)
    assert v["id"][3:] == ref_body(n)  # the vector itself agrees with a hand-written base 62
    assert bid.is_valid(v["id"]) and bid.is_valid(v["id"], v["ns"])


@pytest.mark.parametrize("v", case(V["parse"]))
def test_parse_vector(v):
    n = int(v["n"])
    got = bid.parse(v["id"])
    assert got == (v["ns"], n)
    assert type(got[1]) is int
    assert bid.encode(v["ns"], n) == v["id"]
    assert ref_value(v["id"][3:]) == n
    assert bid.is_valid(v["id"]) and bid.is_valid(v["id"], v["ns"])
    assert not bid.is_valid(v["id"], "XYZ" if v["ns"] != "XYZ" else "ABC")
    if v["ns"] == "JOB":
        assert bid.require(v["id"]) is v["id"]
    else:
        with pytest.raises(KindError):
            bid.require(v["id"])
    assert bid.require(v["id"], v["ns"]) == v["id"]


@pytest.mark.parametrize("v", case(V["refuse_encode"], "why"))
def test_refuse_encode_vector(v):
    with pytest.raises(KindError) as e:
        bid.encode(v["ns"], int(v["n"]))
    assert e.value.code == "EMQKIND"


@pytest.mark.parametrize("v", case(V["refuse_parse"]))
def test_refuse_parse_vector(v):
    s = v["id"]
    assert not ref_valid(s), "the vector must be invalid by the contract itself"
    with pytest.raises(KindError) as e:
        bid.parse(s)
    assert e.value.code == "EMQKIND"
    assert bid.is_valid(s) is False
    assert bid.is_valid(s, "JOB") is False
    with pytest.raises(KindError):
        bid.require(s)
    with pytest.raises(KindError):
        bid.unix_ms(s)


@pytest.mark.parametrize("v", case(V["refuse_job"]))
def test_refuse_job_vector(v):
    """Well-formed ids of another namespace parse, but are refused where a JOB id is required."""
    assert bid.parse(v["id"]) == (v["ns"], int(v["n"]))
    assert bid.is_valid(v["id"]) is True
    assert bid.is_valid(v["id"], "JOB") is False
    assert bid.is_valid(v["id"], v["ns"]) is True
    with pytest.raises(KindError) as e:
        bid.require(v["id"])
    assert e.value.code == "EMQKIND"
    with pytest.raises(KindError):
        bid.require(v["id"], "JOB")
    assert bid.require(v["id"], v["ns"]) == v["id"]


@pytest.mark.parametrize("v", case(V["hash32"], "n"))
def test_hash32_vector(v):
    n = int(v["n"])
    assert v["h"] == ref_hash32(n)  # the vector agrees with the formula as written in §2
    assert bid.hash32(n) == v["h"]


@pytest.mark.parametrize("v", case(V["unix_ms"]))
def test_unix_ms_vector(v):
    _, n = bid.parse(v["id"])
    assert v["ms"] == (n >> 22) + EPOCH
    assert bid.unix_ms(v["id"]) == v["ms"]
    when = datetime.fromtimestamp(v["ms"] / 1000, timezone.utc)
    assert when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{v['ms'] % 1000:03d}Z" == v["iso"]


@pytest.mark.parametrize("v", case(V["snowflake"]))
def test_snowflake_vector(v):
    n = int(v["n"])
    assert bid.snowflake(v["ms"], v["node"], v["seq"]) == n
    assert fields(n) == (v["ms"], v["node"], v["seq"])
    assert bid.encode("JOB", n) == v["id"]
    assert bid.unix_ms(v["id"]) == v["ms"]


def test_ordered_vector():
    ids = V["ordered"]
    values = [bid.parse(i)[1] for i in ids]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert ids == sorted(ids)
    assert [i.encode("ascii") for i in ids] == sorted(i.encode("ascii") for i in ids)


# --------------------------------------------------------------------------- non-str inputs

NON_STR = [
    b"JOB0KHTOWnGLuC",
    bytearray(b"JOB0KHTOWnGLuC"),
    memoryview(b"JOB0KHTOWnGLuC"),
    274557032793636864,
    0,
    None,
    True,
    1.5,
    ["JOB0KHTOWnGLuC"],
    ("JOB", 274557032793636864),
    {"id": "JOB0KHTOWnGLuC"},
    object(),
]


@pytest.mark.parametrize("value", NON_STR, ids=lambda v: type(v).__name__)
def test_non_str_refused(value):
    with pytest.raises(KindError):
        bid.parse(value)
    with pytest.raises(KindError):
        bid.require(value)
    with pytest.raises(KindError):
        bid.unix_ms(value)
    assert bid.is_valid(value) is False
    assert bid.is_valid(value, "JOB") is False


@pytest.mark.parametrize("n", [True, False, 1.0, 0.0, "1", "0", None, b"\x01", 2**63, -1, 10**30], ids=repr)
def test_encode_refuses_non_snowflakes(n):
    with pytest.raises(KindError):
        bid.encode("JOB", n)


@pytest.mark.parametrize("ns", [b"JOB", None, 0, ["J", "O", "B"], "JOB ", " JOB", "JOb", "ÀBC"], ids=repr)
def test_encode_refuses_bad_namespaces(ns):
    with pytest.raises(KindError):
        bid.encode(ns, 0)


def test_refusals_are_kind_errors_not_arg_errors():
    """An ill-formed id is EMQKIND (protocol §2), not EMQARG."""
    with pytest.raises(EmqError) as e:
        bid.parse("JOB0KHTOWnGLu")
    assert isinstance(e.value, KindError) and not isinstance(e.value, ArgError)
    assert str(e.value).startswith("EMQKIND ")


# --------------------------------------------------------------------------- properties

namespaces = st.text(alphabet=UPPER, min_size=3, max_size=3)
snowflakes = st.integers(min_value=0, max_value=MAX)


@FAST
@given(ns=namespaces, n=snowflakes)
@example(ns="AAA", n=0)
@example(ns="ZZZ", n=MAX)
def test_round_trip(ns, n):
    s = bid.encode(ns, n)
    assert len(s) == 14 and s.isascii() and SHAPE.match(s)
    assert s == ns + ref_body(n)
    assert bid.parse(s) == (ns, n)
    assert bid.is_valid(s, ns)


@FAST
@given(ns=namespaces, a=snowflakes, b=snowflakes)
def test_byte_order_is_numeric_order(ns, a, b):
    x, y = bid.encode(ns, a), bid.encode(ns, b)
    assert (x < y) == (a < b)
    assert (x.encode() < y.encode()) == (a < b)
    assert (x == y) == (a == b)


@FAST
@given(body=st.text(alphabet=ALPHABET, min_size=11, max_size=11), ns=namespaces)
def test_every_well_shaped_body_parses_iff_in_range(body, ns):
    s = ns + body
    if ref_value(body) <= MAX:
        assert bid.parse(s) == (ns, ref_value(body))
    else:
        assert not bid.is_valid(s)
        with pytest.raises(KindError):
            bid.parse(s)


@st.composite
def near_misses(draw):
    """A valid id with one edit: a substitution, an insertion or a deletion."""
    s = bid.encode(draw(namespaces), draw(snowflakes))
    i = draw(st.integers(0, len(s)))
    ch = draw(st.characters(codec="utf-8") | st.sampled_from("-_+/= \n\t\x00zZ0aé０𝟎٠K"))
    op = draw(st.sampled_from(["sub", "ins", "del"]))
    if op == "sub" and i < len(s):
        return s[:i] + ch + s[i + 1 :]
    if op == "del" and i < len(s):
        return s[:i] + s[i + 1 :]
    return s[:i] + ch + s[i:]


@settings(max_examples=400, deadline=None)
@given(s=st.text(max_size=20) | near_misses())
@example(s="JOB0KHTOWnGLuC\n")
@example(s="JOBAzL8n0Y58m8")
@example(s="JOB٠٠٠3VLrOWLi")
def test_parse_accepts_exactly_the_contract_shape(s):
    """Any string is accepted iff it matches ^[A-Z]{3}[0-9A-Za-z]{11}$ and is <= 2^63-1."""
    if ref_valid(s):
        assert bid.parse(s) == (s[:3], ref_value(s[3:]))
        assert bid.is_valid(s)
    else:
        assert not bid.is_valid(s)
        with pytest.raises(KindError):
            bid.parse(s)
        with pytest.raises(KindError):
            bid.require(s)


@FAST
@given(s=st.text(max_size=20).filter(lambda s: not SHAPE.match(s)))
def test_any_string_off_the_shape_is_refused(s):
    assert not bid.is_valid(s)
    with pytest.raises(KindError):
        bid.parse(s)


@FAST
@given(value=st.binary() | st.integers() | st.none() | st.floats() | st.booleans() | st.lists(st.text(), max_size=2))
def test_any_non_str_is_refused(value):
    assert not bid.is_valid(value)
    with pytest.raises(KindError):
        bid.parse(value)
    with pytest.raises(KindError):
        bid.require(value)


@FAST
@given(ns=namespaces.filter(lambda ns: ns != "JOB"), n=snowflakes)
def test_require_refuses_every_other_namespace(ns, n):
    s = bid.encode(ns, n)
    with pytest.raises(KindError):
        bid.require(s)
    assert bid.require(s, ns) == s
    assert bid.require("JOB" + s[3:]) == "JOB" + s[3:]


@FAST
@given(n=snowflakes)
@example(n=0)
@example(n=MAX)
@example(n=2**33)
def test_hash32_matches_the_formula(n):
    h = bid.hash32(n)
    assert 0 <= h < 2**32
    assert h == ref_hash32(n)


@FAST
@given(ms=st.integers(EPOCH, EPOCH + 2**41 - 1), node=st.integers(0, 1023), seq=st.integers(0, 4095))
def test_snowflake_layout(ms, node, seq):
    n = bid.snowflake(ms, node, seq)
    assert 0 <= n <= MAX
    assert fields(n) == (ms, node, seq)
    assert bid.unix_ms(bid.encode("JOB", n)) == ms


# --------------------------------------------------------------------------- the minter


class Clock:
    """An injected clock that replays ``readings`` and then stays on the last one."""

    def __init__(self, readings):
        self.readings = list(readings)
        self.i = 0

    def __call__(self) -> int:
        ms = self.readings[min(self.i, len(self.readings) - 1)]
        self.i += 1
        return ms


def ref_mints(readings, node, count):
    """The minter of §2 on the (ms, seq) logical clock: next = max(now_part, last + 1)."""
    out, last = [], -1
    for i in range(count):
        now = max(readings[min(i, len(readings) - 1)], EPOCH)
        logical = max((now - EPOCH) << 12, last + 1)
        last = logical
        out.append(((logical >> 12) << 22) | (node << 12) | (logical & 0xFFF))
    return out


def check_mint_order(ids, values, node, ns="JOB"):
    assert all(i.startswith(ns) and len(i) == 14 for i in ids)
    assert [bid.parse(i)[1] for i in ids] == values
    assert all(a < b for a, b in zip(values, values[1:])), "numeric order == mint order"
    assert all(a < b for a, b in zip(ids, ids[1:])), "byte order == mint order"
    assert ids == sorted(ids, key=lambda s: s.encode())
    assert {fields(v)[1] for v in values} == {node}, "the node bits never change"


readings_st = st.lists(st.integers(EPOCH - 5, EPOCH + 50), min_size=1, max_size=60)


@FAST
@given(readings=readings_st, node=st.integers(0, 1023), ns=namespaces)
@example(readings=[EPOCH + 10, EPOCH + 3, EPOCH + 3, EPOCH + 11, EPOCH], node=1023, ns="JOB")
def test_minter_order_with_a_wandering_clock(readings, node, ns):
    m = bid.Minter(ns, node, clock=Clock(readings))
    ids = [m.mint() for _ in readings]
    values = [bid.parse(i)[1] for i in ids]
    check_mint_order(ids, values, node, ns)
    assert values == ref_mints(readings, node, len(readings))


def test_minter_clock_stuck_on_one_ms_carries_into_the_timestamp():
    ms, node = EPOCH + 1000, 1023  # all node bits set: a carry into them would show
    m = bid.Minter("JOB", node, clock=lambda: ms)
    ids = [m.mint() for _ in range(2 * 4096 + 5)]
    values = [bid.parse(i)[1] for i in ids]
    check_mint_order(ids, values, node)
    assert [fields(v) for v in values[:2]] == [(ms, node, 0), (ms, node, 1)]
    assert fields(values[4095]) == (ms, node, 4095)
    assert fields(values[4096]) == (ms + 1, node, 0), "a full sequence carries into the timestamp"
    assert fields(values[8191]) == (ms + 1, node, 4095)
    assert fields(values[8192]) == (ms + 2, node, 0)
    assert fields(values[-1]) == (ms + 2, node, 4)
    assert values == ref_mints([ms], node, len(values))


def test_minter_clock_steps_back_after_a_carry():
    ms, node = EPOCH + 500, 7
    readings = [ms] * 4097 + [ms - 100] * 3 + [ms + 1] * 2 + [ms + 2]
    m = bid.Minter("JOB", node, clock=Clock(readings))
    ids = [m.mint() for _ in readings]
    values = [bid.parse(i)[1] for i in ids]
    check_mint_order(ids, values, node)
    tail = [fields(v) for v in values[4095:]]
    assert tail == [
        (ms, node, 4095),
        (ms + 1, node, 0),  # carry
        (ms + 1, node, 1),  # the clock stepped back: keep the logical clock
        (ms + 1, node, 2),
        (ms + 1, node, 3),
        (ms + 1, node, 4),  # the clock caught up with the logical clock, not past it
        (ms + 1, node, 5),
        (ms + 2, node, 0),  # the clock passed it: the sequence restarts
    ]
    assert values == ref_mints(readings, node, len(readings))


def test_minter_clock_before_the_epoch_mints_from_the_epoch():
    m = bid.Minter("JOB", 3, clock=lambda: 0)
    assert [fields(m.next_value()) for _ in range(2)] == [(EPOCH, 3, 0), (EPOCH, 3, 1)]


def test_minter_exhausts_at_the_end_of_the_range():
    last_ms = EPOCH + 2**41 - 1
    m = bid.Minter("JOB", 1023, clock=lambda: last_ms)
    values = [m.next_value() for _ in range(4096)]
    assert values[-1] == MAX
    with pytest.raises(KindError):
        m.next_value()
    with pytest.raises(KindError):  # the failed mint did not advance the state
        m.next_value()


def test_minter_next_value_and_mint_share_one_sequence():
    m = bid.Minter("ORD", 9, clock=lambda: EPOCH + 42)
    a = m.next_value()
    b = m.mint()
    assert bid.parse(b) == ("ORD", a + 1)
    assert m.ns == "ORD" and m.node == 9


def test_minter_default_clock_is_now():
    before = int(datetime.now(timezone.utc).timestamp() * 1000)
    i = bid.Minter().mint()
    after = int(datetime.now(timezone.utc).timestamp() * 1000)
    assert i.startswith("JOB")
    assert before - 1 <= bid.unix_ms(i) <= after + 1


def test_minter_is_thread_safe():
    m = bid.Minter("JOB", 5, clock=lambda: EPOCH + 7)
    out: list[list[int]] = [[] for _ in range(4)]

    def work(k):
        out[k].extend(m.next_value() for _ in range(2000))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [v for chunk in out for v in chunk]
    assert len(set(every)) == 8000
    for chunk in out:  # each thread sees its own mints in order
        assert chunk == sorted(chunk)
    assert sorted(every) == ref_mints([EPOCH + 7], 5, 8000)


@pytest.mark.parametrize("ns", ["job", "JO", "JOBS", "", "J0B", "JÖB", " JOB", "JOB\n", None, b"JOB", 123], ids=repr)
def test_minter_rejects_bad_namespaces(ns):
    with pytest.raises(KindError):
        bid.Minter(ns, 0, clock=lambda: EPOCH)


@pytest.mark.parametrize("node", [-1, 1024, 2**10 + 5, True, False, 1.0, "1", None], ids=repr)
def test_minter_rejects_bad_nodes(node):
    with pytest.raises(KindError):
        bid.Minter("JOB", node, clock=lambda: EPOCH)


@pytest.mark.parametrize("node", [0, 1, 1023])
def test_minter_accepts_every_node(node):
    m = bid.Minter("JOB", node, clock=lambda: EPOCH + 1)
    assert fields(m.next_value()) == (EPOCH + 1, node, 0)
