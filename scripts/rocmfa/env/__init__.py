"""The one shared env: arch, conda manager, lock, ROCm SDK, variables, doctor (plumbing only)."""
