"""The build sessions: AOTriton (source or release) into the env's torch, TheRock PyTorch wheels
and their install, composable_kernel. Imports rocmfa.sources, rocmfa.env, rocmfa.plumbing."""
