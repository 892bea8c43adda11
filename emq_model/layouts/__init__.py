"""Layouts: one module per keyspace layout (contract in ``specs/layouts/``), each a pure
model, its projection snapshot and its invariants. The four-set layout (``echomq``) is
``emq_model.model``; ``bullmq`` is BullMQ's lists and sorted sets."""
