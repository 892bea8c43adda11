"""Raw calls: the scripts called past the client, as a port may call them, one module a
job (KEYS and ARGV assembled from the contract, one thing spoiled at a time):

- ``contract``: a ``RawCall`` and the contract's verdict on it (CC-6's refusal, or the
  decoded well-formed call), and the call as a trace step's arguments;
- ``variants``: the kinds of spoils and edges (``KINDS``), the calls of each for an op
  (``calls``), and the one packed draw of a call (``RAW``);
- ``judge``: ``RawJudge``, which sends a call and judges the answer and the keyspace,
  and the deterministic ``sweep`` of every call;
- ``edits``: the one-check edits of lib.lua and batch.lua the sweep must find;
- ``rule``: the conformance machine's raw-call rule and once-per-run sweep (imported by
  the machine itself, not here).

The names a caller uses are here too (``from emq_kit.check import raw``; ``raw.KINDS``).
"""

from emq_kit.check.raw.contract import (
    NOW,
    OPS,
    OTHER,
    QUEUE,
    Decoded,
    RawCall,
    call_of,
    queue_of,
    queues_named,
    step_args,
    verdict,
)
from emq_kit.check.raw.edits import CHECK_EDITS, CheckEdit
from emq_kit.check.raw.judge import Finding, RawJudge, prepare, sweep
from emq_kit.check.raw.variants import (
    BAD_QUEUES,
    EDGE_IDS,
    EDGE_QUEUES,
    KINDS,
    OVERFLOWING_IDS,
    RAW,
    RULES,
    SWEPT,
    base,
    calls,
    drawn,
    drawn_op,
    kind_of,
)

__all__ = [
    "BAD_QUEUES", "CHECK_EDITS", "EDGE_IDS", "EDGE_QUEUES", "KINDS", "NOW", "OPS", "OTHER", "OVERFLOWING_IDS",
    "QUEUE", "RAW", "RULES", "SWEPT", "CheckEdit", "Decoded", "Finding", "RawCall", "RawJudge", "base", "call_of",
    "calls", "drawn", "drawn_op", "kind_of", "prepare", "queue_of", "queues_named", "step_args", "sweep", "verdict",
]
