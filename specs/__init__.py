"""The normative EchoMQ lifecycle contract, shipped as package data (``emq_specs``).

Nothing here is code: the prose, the transition table, the vectors and the schemas are
read by ``emq_model.spec`` and by the tests. This file only makes the folder installable.
"""
