"""Plumbing every session uses: one-line errors, the command runner (--dry-run), stamps, the
shared option table, data files and work-dir paths, job limits. Imports nothing else of ours."""
