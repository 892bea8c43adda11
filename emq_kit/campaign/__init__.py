"""Campaigns: many checks, or the selftest's mutants, as tasks of a Dask cluster, their
results combined into one report, and the conformance matrix (specs/campaign.md)."""
