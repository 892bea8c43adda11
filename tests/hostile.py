"""Queue names KS-3 accepts that a pattern built from them would misread: the specials of
a SCAN/KEYS/ACL glob (``* ? [ ] \\``), of a Lua pattern (``^$()%.[]*+-?``) and of a JS
replacement string or key template (``$& $' <id>``), alone, inside a name, and ending a
128-byte name. Every run's server names hold ``-`` (``alpha-1f3a9c02``, OWN-2).

``NEIGHBOURS`` are the names such a misread pattern would take for one of ``HOSTILE``
(``a-b`` as a Lua pattern finds ``b``, ``a.b`` finds ``axb``, ``β*[x]`` as a glob
matches ``βyx``): a test holds keys under all of ``NAMES`` and asserts that whatever
the kit builds from one name reaches that name's keys only."""

from __future__ import annotations

from emq_model import keyspace

LONG = "x" * (keyspace.QUEUE_MAX_BYTES - 1)

HOSTILE = ("a-b", "a.b", "a%b", "a(b", "a[b", "a]b", "a\\b", "a^b$", "a+b", "*", "?", "[", "%", "-", ".",
           "β*[x]", "a<id>b", "<id>", "a$&b", "a$'b", "alpha-1f3a9c02",
           *(LONG + c for c in "*?[%-.("))
NEIGHBOURS = ("a", "b", "ab", "aab", "axb", "x", "βyx", "aJOB00000000001b", LONG + "y", LONG + "x")
NAMES = (*HOSTILE, *NEIGHBOURS)

assert all(keyspace.check_queue(n) == n for n in NAMES) and len(set(NAMES)) == len(NAMES)
