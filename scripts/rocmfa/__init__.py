"""The logic behind the nox sessions, in layers whose imports point one way (README.md, Layout):
sharing -> builds -> sources -> env -> plumbing; probes stand alone (torch and stdlib only)."""
