"""Probes run inside the target env's Python with torch and the standard library only, also as
plain scripts (`python scripts/rocmfa/probes/bench.py`): bench, backend_check, validate, and
their sdpa_common. They import nothing of ours but each other."""
