"""Logic behind the nox sessions: one small module per job.

Modules that run inside the target env's Python (bench, backend_check, validate) use torch
and the standard library only and are runnable on their own; everything else runs in the
tooling interpreter that runs nox.
"""
