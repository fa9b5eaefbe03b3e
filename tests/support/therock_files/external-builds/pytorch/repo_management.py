"""Stand-in for TheRock's external-builds/pytorch/repo_management.py
(CLI as at TheRock@89553ce3, the pin).

Made for the tests from that file: the checkout options shared by the
pytorch_*_repo.py scripts, a git checkout at --repo-hashtag from --gitrepo-origin, a
"hipify" that commits its result, and the THEROCK_* diffbase tags. Every accepted command
line is appended to standin-calls.jsonl next to this file so tests can assert on it.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

THIS_DIR = Path(__file__).resolve().parent
CALLS = THIS_DIR / "standin-calls.jsonl"

GIT_ENV = {
    "GIT_AUTHOR_NAME": "TheRock stand-in",
    "GIT_AUTHOR_EMAIL": "standin@example.invalid",
    "GIT_COMMITTER_NAME": "TheRock stand-in",
    "GIT_COMMITTER_EMAIL": "standin@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}


def record(script, argv, **facts):
    entry = {"script": script, "argv": list(argv), "cwd": os.getcwd(), **facts}
    with open(CALLS, "a") as f:
        f.write(json.dumps(entry, default=str) + "\n")


def git(args, cwd, capture=False):
    result = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        check=True,
        text=True,
        stdout=subprocess.PIPE if capture else None,
    )
    return (result.stdout or "").strip()


def add_checkout_options(parser, default_hipify):
    parser.add_argument("--depth", type=int, default=None, help="fetch depth")
    parser.add_argument("--jobs", type=int, default=None, help="fetch jobs")
    parser.add_argument("--submodules", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--hipify", action=argparse.BooleanOptionalAction, default=default_hipify)
    parser.add_argument("--commit-hipify", action=argparse.BooleanOptionalAction, default=True)


def read_pytorch_rocm_pins(torch_dir, project, default_origin, default_hashtag):
    """(origin, commit, found) from <torch_dir>/related_commits, os 'ubuntu'."""
    path = Path(torch_dir) / "related_commits"
    if path.is_file():
        for line in path.read_text().splitlines():
            fields = line.strip().split("|")
            if len(fields) == 6 and fields[0] == "ubuntu" and fields[2] == project:
                return fields[5], fields[4], True
    return default_origin, default_hashtag, False


def do_checkout(args, custom_hipify=None):
    repo = Path(args.checkout_dir).resolve()
    repo.mkdir(parents=True, exist_ok=True)
    if not (repo / ".git").exists():
        git(["init", "-q"], repo)
        git(["remote", "add", "origin", args.gitrepo_origin], repo)
    else:
        git(["remote", "set-url", "origin", args.gitrepo_origin], repo)
    fetch = ["fetch", "-q"]
    if args.depth:
        fetch += ["--depth", str(args.depth)]
    git([*fetch, "origin", args.repo_hashtag], repo)
    git(["checkout", "-q", "--force", "FETCH_HEAD"], repo)
    git(["tag", "-f", "THEROCK_UPSTREAM_DIFFBASE"], repo, capture=True)
    if args.hipify:
        (custom_hipify or do_hipify)(args)


def do_hipify(args):
    repo = Path(args.checkout_dir).resolve()
    head = git(["rev-parse", "HEAD"], repo, capture=True)
    (repo / "HIPIFY_DONE").write_text(f"hipified on top of {head}\n")
    if getattr(args, "commit_hipify", True):
        git(["add", "-A"], repo)
        git(["commit", "-q", "-m", "DO NOT SUBMIT: HIPIFY"], repo)
        git(["tag", "-f", "THEROCK_HIPIFY_DIFFBASE"], repo, capture=True)


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)
