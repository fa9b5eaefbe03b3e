"""Upstream sources: pins, checkouts at the pinned commit, patch sets, update_pins."""
