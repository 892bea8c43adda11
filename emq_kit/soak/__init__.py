"""Soak: concurrent workers on a real server (workload), the accounting of every job
(ledger), the recorded history (history) and its linearizability check (linearize)."""
