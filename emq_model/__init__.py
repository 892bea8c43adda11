"""emq_model — the pure, in-memory oracle of the EchoMQ lifecycle. No I/O."""
