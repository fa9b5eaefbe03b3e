"""`nox -s repair`: finish or roll back an interrupted install into the env's torch. The guard
around every session (scripts/env/session_guard.py) does the work; this says what is left."""

from __future__ import annotations

from scripts.env.session_guard import report, resolved_prefix, where_of
from scripts.plumbing.errors import UserError
from scripts.plumbing.options import RepairOptions


def repair(opts: RepairOptions) -> None:
    """`nox -s repair`: the guard around it has recovered the env; say what is left."""
    prefix = resolved_prefix(where_of(opts))
    if prefix is None:
        raise UserError("no env to repair: pass --prefix or --env-name")
    left = report(prefix)
    for line in left:
        print(line)
    if not left:
        print(f"env {prefix}: no interrupted change left")
