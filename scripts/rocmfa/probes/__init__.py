"""Probes (bench, backend_check, validate, upstream_sdpa and their sdpa_common): torch and the
standard library only, also run as plain scripts; they import nothing of ours but each other."""
