"""Keyspace (protocol §3) and cluster slots (§2): the vectors of specs/vectors/keyspace.json,
one case each, and properties of the key builder's gate.

Expected slots come from the vectors (cross-checked with valkey-server CLUSTER KEYSLOT when
they were recorded) and from ``binascii.crc_hqx`` (an independent CRC16-XMODEM), never from
the module under test.
"""

from __future__ import annotations

import binascii
import json
import unicodedata

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from emq_model import keyspace as ks
from emq_model.branded_id import encode
from emq_model.errors import ArgError, KindError
from emq_model.spec import LIMITS, LOCATIONS, SPEC, text

V = json.loads(text("vectors/keyspace.json"))
MAX_BYTES = LIMITS["queue_max_bytes"]
FAST = settings(max_examples=200, deadline=None)
UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def case(vectors: list[dict], key: str) -> list:
    return [pytest.param(v, id=repr(v[key])[:40]) for v in vectors]


def ref_tag(key: bytes) -> bytes:
    """The cluster's hash-tag rule: the inside of the first ``{`` and the first ``}`` after
    it, if non-empty; otherwise the whole key."""
    if b"{" in key:
        head, _, rest = key.partition(b"{")
        inside, found, _ = rest.partition(b"}")
        if found and inside:
            return inside
    return key


def ref_slot(key: str | bytes) -> int:
    raw = key.encode("utf-8") if isinstance(key, str) else key
    return binascii.crc_hqx(ref_tag(raw), 0) % 16384


def forbidden(ch: str) -> bool:
    """A character the contract refuses in a queue name: a brace, whitespace, a control."""
    return ch in "{}" or ch.isspace() or unicodedata.category(ch) == "Cc"


def builders(queue):
    """Every way to build a key from a queue name."""
    return [
        lambda: ks.check_queue(queue),
        lambda: ks.prefix(queue),
        lambda: ks.queue_keys(queue),
        lambda: ks.job_key(queue, "JOB0KHTOWnGLuC"),
        *[(lambda k=k: ks.queue_key(queue, k)) for k in ks.KINDS],
    ]


# --------------------------------------------------------------------------- the file


def test_vector_file_header():
    assert V["version"] == 1
    assert V["queue_max_bytes"] == MAX_BYTES == ks.QUEUE_MAX_BYTES == 128
    assert V["kinds"] == list(ks.KINDS)
    assert ks.KINDS == ("pending", "active", "schedule", "dead", "metrics:completed", "metrics:failed")
    assert ks.KINDS[:4] == LOCATIONS  # the four locations, in transitions.json's order
    assert V["version_key"] == ks.VERSION_KEY == "{emq}:version"


def test_kinds_match_the_keyspace_table():
    """The fixed keys of §3, as named by specs/transitions.json."""
    table = {k: v for k, v in SPEC["keys"].items() if k not in ("row", "version", "lane", *ks.LANE_KINDS)}
    assert sorted(table.values()) == sorted(ks.queue_keys("q"))
    assert ks.job_key("q", "JOB0KHTOWnGLuC") == SPEC["keys"]["row"].replace("<id>", "JOB0KHTOWnGLuC")
    assert ks.lane_keys("q") == {kind: SPEC["keys"][kind] for kind in ks.LANE_KINDS}
    assert ks.lane_key("q", "p1") == SPEC["keys"]["lane"].replace("<group>", "p1")


def test_lane_vectors():
    """LANE-1, LANE-2: lane keys, and the group names a lane may and may not have."""
    assert V["lane_kinds"] == list(ks.LANE_KINDS)
    for v in V["lane_key"]:
        assert ks.lane_key(v["queue"], v["group"]) == v["key"]
        assert ks.group_of(v["queue"], v["key"]) == v["group"]
    for v in V["refuse_group"]:
        with pytest.raises(ArgError):
            ks.lane_key("q", v["group"])
        assert ks.group_of("q", "emq:{q}:g:" + v["group"] + ":pending") is None, v["why"]


def test_queue_keys_in_kinds_order():
    assert ks.queue_keys("q") == [
        "emq:{q}:pending",
        "emq:{q}:active",
        "emq:{q}:schedule",
        "emq:{q}:dead",
        "emq:{q}:metrics:completed",
        "emq:{q}:metrics:failed",
    ]


def test_vectors_cover_the_boundaries():
    acc = {v["queue"] for v in V["accept_queue"]}
    ref = {v["queue"] for v in V["refuse_queue"]}
    assert {len(q.encode()) for q in acc} >= {1, 128}
    assert 129 in {len(q.encode()) for q in ref}
    assert any(len(q) < 128 and len(q.encode()) == 128 for q in acc)  # multibyte at the limit
    assert any(len(q) < 129 and len(q.encode()) == 129 for q in ref)
    assert {"", "{", "}", "a\x00b", "a\x7fb", "a b", "a\tb", "a\nb"} <= ref
    slots = {v["key"]: v["slot"] for v in V["slot"]}
    assert slots["123456789"] == 12739
    assert slots["emq:{q}:pending"] == slots["q"]


# --------------------------------------------------------------------------- vectors


@pytest.mark.parametrize("v", case(V["queue_key"], "key"))
def test_queue_key_vector(v):
    assert ks.queue_key(v["queue"], v["kind"]) == v["key"]
    assert v["key"] in ks.queue_keys(v["queue"])
    assert ks.prefix(v["queue"]) == "emq:{" + v["queue"] + "}:"
    assert ks.hash_tag(v["key"].encode()) == v["queue"].encode()
    assert ks.slot(v["key"]) == ks.slot(v["queue"]) == ref_slot(v["queue"])


@pytest.mark.parametrize("v", case(V["job_key"], "key"))
def test_job_key_vector(v):
    assert ks.job_key(v["queue"], v["id"]) == v["key"]
    assert ks.hash_tag(v["key"].encode()) == v["queue"].encode()
    assert ks.slot(v["key"]) == ref_slot(v["queue"])


@pytest.mark.parametrize("v", case(V["refuse_kind"], "kind"))
def test_refuse_kind_vector(v):
    with pytest.raises(ArgError):
        ks.queue_key("q", v["kind"])


@pytest.mark.parametrize("v", case(V["refuse_job_key"], "id"))
def test_refuse_job_key_vector(v):
    with pytest.raises(KindError) as e:
        ks.job_key(v["queue"], v["id"])
    assert e.value.code == "EMQKIND"


@pytest.mark.parametrize("v", case(V["accept_queue"], "queue"))
def test_accept_queue_vector(v):
    q = v["queue"]
    assert len(q.encode("utf-8")) == v["bytes"] <= MAX_BYTES
    assert ks.check_queue(q) is q
    for key in ks.queue_keys(q):
        assert key.startswith("emq:{" + q + "}:")
        assert ks.hash_tag(key.encode()) == q.encode()
        assert ks.slot(key) == ref_slot(q)


@pytest.mark.parametrize("v", case(V["refuse_queue"], "queue"))
def test_refuse_queue_vector(v):
    q = v["queue"]
    assert not q or len(q.encode()) > MAX_BYTES or any(forbidden(c) for c in q), "invalid by the contract"
    for build in builders(q):
        with pytest.raises(ArgError) as e:
            build()
        assert e.value.code == "EMQARG"


@pytest.mark.parametrize("v", case(V["slot"], "key"))
def test_slot_vector(v):
    raw = v["key"].encode()
    assert ref_tag(raw) == v["tag"].encode()
    assert ref_slot(raw) == v["slot"]
    assert ks.hash_tag(raw) == v["tag"].encode()
    assert ks.slot(v["key"]) == v["slot"]
    assert ks.slot(raw) == v["slot"]


def test_version_key_slot():
    assert ks.slot(ks.VERSION_KEY) == ref_slot("emq")


@pytest.mark.parametrize("queue", [b"q", bytearray(b"q"), None, 1, ["q"], ("q",)], ids=repr)
def test_non_str_queue_refused(queue):
    for build in builders(queue):
        with pytest.raises(ArgError):
            build()


def test_unencodable_queue_refused():
    """A lone surrogate is a str that UTF-8 cannot carry."""
    for build in builders("q\ud800"):
        with pytest.raises(ArgError):
            build()


@pytest.mark.parametrize("branded", [b"JOB0KHTOWnGLuC", None, 274557032793636864], ids=repr)
def test_job_key_refuses_non_str_ids(branded):
    with pytest.raises(KindError):
        ks.job_key("q", branded)


# --------------------------------------------------------------------------- properties

# Characters that are fine in a queue name by every reading of the contract (letters,
# marks, numbers, punctuation, symbols) minus the braces.
name_chars = st.characters(categories=["L", "M", "N", "P", "S"], exclude_characters="{}")
names = st.text(name_chars, min_size=1, max_size=32)  # at most 4 bytes a character: <= 128 bytes
bad_chars = st.sampled_from("{} \t\n\r\x0b\x0c\x00\x01\x1b\x1f\x7f\x85\x9b\xa0\u1680\u2003\u2028\u2029\u3000") | (
    st.characters(categories=["Cc", "Zs", "Zl", "Zp"])
)


@FAST
@given(q=names)
@example(q="a" * 128)
@example(q="😀" * 32)
@example(q="€")
def test_accepted_names_round_trip_into_keys(q):
    assert ks.check_queue(q) is q
    keys = ks.queue_keys(q)
    assert keys == [ks.queue_key(q, k) for k in ks.KINDS]
    assert keys == ["emq:{" + q + "}:" + k for k in ks.KINDS]
    row = ks.job_key(q, "JOB0KHTOWnGLuC")
    assert row == "emq:{" + q + "}:job:JOB0KHTOWnGLuC"
    for key in keys + [row]:
        assert ks.hash_tag(key.encode()) == q.encode(), "the hash tag is exactly the queue name"
        assert ref_tag(key.encode()) == q.encode()
        assert ks.slot(key) == ks.slot(q) == ref_slot(q)


@FAST
@given(head=st.text(name_chars, max_size=10), bad=bad_chars, tail=st.text(name_chars, max_size=10))
def test_names_with_a_forbidden_character_are_refused(head, bad, tail):
    q = head + bad + tail
    assert forbidden(bad)
    for build in builders(q):
        with pytest.raises(ArgError):
            build()


@FAST
@given(q=st.text(min_size=1, max_size=40))
def test_arbitrary_text_is_refused_when_the_contract_says_so(q):
    """The contract's refusals are a floor: a name it forbids is never accepted."""
    if len(q.encode("utf-8", "surrogatepass")) > MAX_BYTES or any(forbidden(c) for c in q):
        with pytest.raises(ArgError):
            ks.check_queue(q)


@FAST
@given(q=st.text(name_chars, min_size=1, max_size=60), extra=st.integers(1, 4))
def test_byte_length_decides_at_the_limit(q, extra):
    while len(q.encode()) <= MAX_BYTES:
        q += "é" * extra
    assert len(q.encode()) > MAX_BYTES
    with pytest.raises(ArgError):
        ks.check_queue(q)
    trimmed = q
    while len(trimmed.encode()) > MAX_BYTES:
        trimmed = trimmed[:-1]
    assert ks.check_queue(trimmed) is trimmed


@FAST
@given(ns=st.text(UPPER, min_size=3, max_size=3).filter(lambda ns: ns != "JOB"), n=st.integers(0, 2**63 - 1), q=names)
def test_job_key_refuses_non_job_ids(ns, n, q):
    with pytest.raises(KindError):
        ks.job_key(q, encode(ns, n))
    job = encode("JOB", n)
    assert ks.job_key(q, job) == "emq:{" + q + "}:job:" + job


@FAST
@given(key=st.binary(max_size=30) | st.text(max_size=30).map(lambda s: s.encode("utf-8", "surrogatepass")))
@example(key=b"{}")
@example(key=b"foo{}{bar}")
@example(key=b"foo{{bar}}")
@example(key=b"foo{bar}{zap}")
@example(key=b"}{x}")
def test_slot_matches_crc16_xmodem_of_the_tag(key):
    assert ks.hash_tag(key) == ref_tag(key)
    s = ks.slot(key)
    assert 0 <= s < 16384
    assert s == ref_slot(key)


@FAST
@given(
    tag=st.binary(min_size=1, max_size=12).filter(lambda b: b"}" not in b),
    a=st.binary(max_size=8).filter(lambda b: b"{" not in b),
    z=st.binary(max_size=8),
)
def test_keys_sharing_a_tag_share_a_slot(tag, a, z):
    key = a + b"{" + tag + b"}" + z
    assert ks.hash_tag(key) == tag
    assert ks.slot(key) == ks.slot(tag) == binascii.crc_hqx(tag, 0) % 16384
