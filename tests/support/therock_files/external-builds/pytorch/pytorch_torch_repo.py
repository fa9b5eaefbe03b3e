#!/usr/bin/env python
"""Stand-in for TheRock's pytorch_torch_repo.py (CLI as at TheRock@89553ce3, the pin)."""

import argparse
import sys
from pathlib import Path

import repo_management

THIS_MAIN_REPO_NAME = "pytorch"
THIS_DIR = Path(__file__).resolve().parent
DEFAULT_ORIGIN = "https://github.com/pytorch/pytorch.git"
DEFAULT_HASHTAG = "nightly"


def build_parser():
    def add_common(command_parser):
        command_parser.add_argument(
            "--checkout-dir", type=Path, default=THIS_DIR / THIS_MAIN_REPO_NAME
        )
        command_parser.add_argument("--repo-name", type=Path, default=THIS_MAIN_REPO_NAME)
        command_parser.add_argument("--repo-hashtag", default=DEFAULT_HASHTAG)

    p = argparse.ArgumentParser("pytorch_torch_repo.py")
    sub_p = p.add_subparsers(required=True)
    checkout_p = sub_p.add_parser("checkout")
    add_common(checkout_p)
    checkout_p.add_argument("--gitrepo-origin", default=DEFAULT_ORIGIN)
    repo_management.add_checkout_options(checkout_p, default_hipify=True)
    checkout_p.set_defaults(jobs=10, func=repo_management.do_checkout)
    hipify_p = sub_p.add_parser("hipify")
    add_common(hipify_p)
    hipify_p.set_defaults(func=repo_management.do_hipify)
    return p


def main(cl_args):
    args = build_parser().parse_args(cl_args)
    repo_management.record("pytorch_torch_repo.py", cl_args)
    args.func(args)


if __name__ == "__main__":
    main(sys.argv[1:])
