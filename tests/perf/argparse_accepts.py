"""Does a real upstream script's argparse accept a command line? (No upstream code here.)

    python tests/perf/argparse_accepts.py SCRIPT [ARG ...]

Runs SCRIPT as __main__ (its own directory first on sys.path, as when it is run directly) with
argparse.ArgumentParser.parse_args wrapped. Where the parsed options carry a `func` (the
subcommand handler, as TheRock's scripts do), the script's own checks between parsing and that
call still run (e.g. build_prod_wheels' validate_build_args, which needs the --*-dir folders to
exist); the handler is replaced by one that prints the options as JSON and exits 0. Without a
`func` it stops right after parsing. A rejected command line exits 2 with argparse's message.
Used to check the argv our --dry-run prints against the real TheRock scripts extracted outside
the repository (docs/upstream-interfaces.md).
"""

import argparse
import json
import runpy
import sys
from pathlib import Path


class Accepted(SystemExit):
    pass


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    script = Path(sys.argv[1]).resolve()
    original = argparse.ArgumentParser.parse_args

    def accept(parsed: argparse.Namespace) -> None:
        found = {k: v for k, v in vars(parsed).items() if not callable(v)}
        print(json.dumps(found, default=str, sort_keys=True))
        raise Accepted(0)

    def parse_and_stop(self, args=None, namespace=None):
        parsed = original(self, args, namespace)
        if callable(getattr(parsed, "func", None)):
            parsed.func = accept
            return parsed
        accept(parsed)

    argparse.ArgumentParser.parse_args = parse_and_stop
    sys.argv = [str(script), *sys.argv[2:]]
    sys.path.insert(0, str(script.parent))
    runpy.run_path(str(script), run_name="__main__")
    raise SystemExit(f"{script.name}: never parsed its command line")


if __name__ == "__main__":
    main()
