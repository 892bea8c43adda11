"""emq_model — the pure, in-memory oracle of the EchoMQ lifecycle. No I/O.

``QueueModel`` is the oracle, ``Snapshot`` the value both it and a live keyspace are read
into, ``invariants.check`` the judge of a snapshot; the contract is ``specs/``.
"""

from .errors import EmqError
from .model import Claimed, QueueModel
from .snapshot import Snapshot

__all__ = ["Claimed", "EmqError", "QueueModel", "Snapshot"]
