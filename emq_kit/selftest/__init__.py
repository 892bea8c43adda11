"""Selftest: mutate our own Lua scripts and prove the machine kills every mutant
(mutation; the known equivalent mutants in equivalent_mutants.json)."""
