"""Sharing wheel sets: install_wheels (this run's or a team index's), publish to a team index,
the index and its manifests. Imports rocmfa.builds and the layers below."""
