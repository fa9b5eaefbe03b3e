"""Plumbing every session uses: one-line errors, the command runner (it plans instead of
running on a dry run), stamps, the shared option table, data files and work-dir paths, job
limits. Imports nothing else of ours."""
