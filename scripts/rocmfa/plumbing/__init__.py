"""Plumbing every session uses: errors, the command runner, stamps, options, data files, paths."""
