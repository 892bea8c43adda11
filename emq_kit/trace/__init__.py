"""Traces: the file format (format), replaying one on the model and a target (replay),
and a trace as a standalone pytest regression test (export)."""
