"""The check engine: the conformance machine (machine, draws, selection), the target it
drives beside the model (target, live), the clock, coverage, the in-memory snapshot of
fakeredis, and ``run_check`` with its profiles (run)."""
