"""Logic behind the nox sessions, in layers whose imports point one way:

    builds  ->  sources  ->  env  ->  plumbing          probes (stand alone)

- plumbing: errors, running commands, stamps, the shared option table, data files, work paths.
- env: the one shared conda env - arch detection, manager, lock, activation variables, the
  ROCm SDK, setup_env, doctor, and running the probes in the env.
- sources: pins, checkouts at pinned commits, checksummed patch sets, update_pins.
- builds: AOTriton (from source or release) into the env's torch, TheRock PyTorch wheels,
  install_wheels, composable_kernel.
- probes: bench, backend_check, validate - run inside the target env's Python with torch and
  the standard library only (`python scripts/rocmfa/probes/bench.py`); they import only each other.
"""
