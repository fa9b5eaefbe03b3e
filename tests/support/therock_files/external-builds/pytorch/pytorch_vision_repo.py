#!/usr/bin/env python
"""Stand-in for TheRock's pytorch_vision_repo.py (CLI as at TheRock@89553ce3, the pin)."""

import sys
from pathlib import Path

import _related_repo

THIS_DIR = Path(__file__).resolve().parent
ARGS = (
    "pytorch_vision_repo.py",
    "pytorch_vision",
    "torchvision",
    "https://github.com/pytorch/vision.git",
    THIS_DIR,
)


def build_parser():
    return _related_repo.build_parser(ARGS[0], ARGS[1], THIS_DIR, True)


if __name__ == "__main__":
    _related_repo.main(*ARGS, sys.argv[1:], "nightly", True)
