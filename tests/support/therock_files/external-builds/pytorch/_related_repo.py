"""Shared body of the stand-in pytorch_audio_repo.py / pytorch_vision_repo.py /
pytorch_apex_repo.py: --gitrepo-origin, --repo-hashtag, --torch-dir and
--[no-]require-related-commit on both subcommands (as the real scripts at TheRock@89553ce3
declare them); default origin and hashtag come from <torch-dir>/related_commits, else the
script's fallbacks (audio/vision "nightly", apex "master"; apex does not hipify by default)."""

import argparse
from pathlib import Path

import repo_management


def build_parser(prog, repo_name, this_dir, default_hipify=True):
    def add_common(command_parser):
        command_parser.add_argument("--checkout-dir", type=Path, default=this_dir / repo_name)
        command_parser.add_argument("--gitrepo-origin", type=str, default=None)
        command_parser.add_argument("--repo-name", type=Path, default=repo_name)
        command_parser.add_argument("--repo-hashtag", type=str, default=None)
        command_parser.add_argument(
            "--require-related-commit", action=argparse.BooleanOptionalAction
        )
        command_parser.add_argument("--torch-dir", type=Path, default=this_dir / "pytorch")

    p = argparse.ArgumentParser(prog)
    sub_p = p.add_subparsers(required=True)
    checkout_p = sub_p.add_parser("checkout")
    add_common(checkout_p)
    repo_management.add_checkout_options(checkout_p, default_hipify=default_hipify)
    checkout_p.set_defaults(command="checkout")
    hipify_p = sub_p.add_parser("hipify")
    add_common(hipify_p)
    hipify_p.set_defaults(command="hipify")
    return p


def main(
    prog, repo_name, project, default_origin, this_dir, cl_args, default_hashtag, default_hipify
):
    args = build_parser(prog, repo_name, this_dir, default_hipify).parse_args(cl_args)
    repo_management.record(prog, cl_args)
    if args.command == "hipify":
        repo_management.do_hipify(args)
        return
    origin, hashtag, found = repo_management.read_pytorch_rocm_pins(
        args.torch_dir, project, default_origin, default_hashtag
    )
    if args.require_related_commit and not found:
        repo_management.fail(f"Could not find {project} in pytorch/related_commits")
    args.gitrepo_origin = args.gitrepo_origin or origin
    args.repo_hashtag = args.repo_hashtag or hashtag
    repo_management.do_checkout(args)
