"""Wheel sets: install_wheels (this run's, or a team index's) and publish; over builds/."""
