#!/usr/bin/env python
"""Stand-in for TheRock's pytorch_triton_repo.py (CLI as at TheRock@89553ce3, the pin).

The default hashtag is PyTorch's .ci/docker/ci_commit_pins/triton.txt; the Linux "hipify"
step writes build_env.json (read back by build_prod_wheels.py). No --patch/--patchset.
"""

import argparse
import json
import sys
from pathlib import Path

import repo_management

THIS_MAIN_REPO_NAME = "triton"
THIS_DIR = Path(__file__).resolve().parent
ROCM_TRITON_ORIGIN = "https://github.com/ROCm/triton.git"


def build_parser():
    def add_common(command_parser):
        command_parser.add_argument(
            "--checkout-dir", type=Path, default=THIS_DIR / THIS_MAIN_REPO_NAME
        )
        command_parser.add_argument("--repo-name", type=Path, default=THIS_MAIN_REPO_NAME)
        command_parser.add_argument("--repo-hashtag", default=None)

    p = argparse.ArgumentParser("pytorch_triton_repo.py")
    sub_p = p.add_subparsers(required=True)
    checkout_p = sub_p.add_parser("checkout")
    add_common(checkout_p)
    checkout_p.add_argument("--torch-dir", type=Path, default=THIS_DIR / "pytorch")
    checkout_p.add_argument("--gitrepo-origin", default=ROCM_TRITON_ORIGIN)
    checkout_p.add_argument("--release", default=False, action=argparse.BooleanOptionalAction)
    repo_management.add_checkout_options(checkout_p, default_hipify=True)
    return p


def main(cl_args):
    args = build_parser().parse_args(cl_args)
    repo_management.record("pytorch_triton_repo.py", cl_args)
    torch_dir = Path(args.torch_dir)
    if not torch_dir.exists():
        repo_management.fail(
            f"Could not find torch dir: {torch_dir} (did you check out torch first)"
        )
    build_env = {}
    if args.repo_hashtag is None:
        if args.release:
            version = (torch_dir / ".ci" / "docker" / "triton_version.txt").read_text().strip()
            major, minor, *_ = version.split(".")
            args.repo_hashtag = f"release/{major}.{minor}.x"
        else:
            pin = torch_dir / ".ci" / "docker" / "ci_commit_pins" / "triton.txt"
            args.repo_hashtag = pin.read_text().strip()
            build_env["TRITON_WHEEL_VERSION_SUFFIX"] = ""

    def write_build_env(_args):
        with open(Path(args.checkout_dir) / "build_env.json", "w") as f:
            json.dump(build_env, f, indent=2)

    repo_management.do_checkout(args, custom_hipify=write_build_env)


if __name__ == "__main__":
    main(sys.argv[1:])
