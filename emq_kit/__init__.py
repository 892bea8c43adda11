"""emq_kit — the conformance kit: the machine that drives the model and an implementation
side by side, its targets, and the ``emq`` command."""
