"""`nox -s matrix`: arch x AOTriton release (scripts/rocmfa/env/compat_matrix.py), as Markdown or
JSON, with the line for this host."""

from __future__ import annotations

import json

from rocmfa.env.compat_matrix import host_line, problems, render_markdown, table
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import MatrixOptions


def matrix(opts: MatrixOptions) -> None:
    report = table()
    report["host"] = host_line(opts.arch)
    if opts.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_markdown(report), end="")
    broken = problems(report, opts.arch)  # after the screen
    if broken:
        raise UserError(f"matrix: {'; '.join(broken)}")
