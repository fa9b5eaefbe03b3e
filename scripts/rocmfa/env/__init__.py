"""The one shared env: arch detection and capabilities, the conda manager, the lock, activation
variables, TheRock's ROCm SDK, setup_env, doctor, and running the probes with the env's Python.
Imports only rocmfa.plumbing."""
