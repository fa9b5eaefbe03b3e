"""Upstream sources: pins (url, ref, commit), checkouts at the pinned commit, checksummed patch
sets chosen by commit, update_pins. Imports rocmfa.env and rocmfa.plumbing."""
