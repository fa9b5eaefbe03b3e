"""Ctrl-C is honoured within a second or two wherever the tooling waits on a child: the run
stops, says which command it interrupted, and leaves no child behind. (Downloads:
tests/test_rattler_env.py, a silent mirror.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import loopback

REPO_ROOT = Path(__file__).resolve().parent.parent

# A child that ignores SIGINT (as a build tool busy in a compiler may), run by our Runner.
PARENT = """
import sys
from pathlib import Path
from rocmfa.plumbing.commands import Runner
child = "import os, signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
child += "Path = __import__('pathlib').Path; Path(%r).write_text(str(os.getpid())); time.sleep(120)"
Runner().run([sys.executable, "-c", child % sys.argv[1]], cwd=Path(sys.argv[2]))
"""


def test_ctrl_c_stops_a_runner_command_and_its_child_at_once(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    run = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(pid_file), str(tmp_path)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    took, _out, err = loopback.interrupt_when(  # to our process only, as `kill -INT` does
        run, lambda: pid_file.exists() and bool(pid_file.read_text())
    )
    child = int(pid_file.read_text())
    assert run.returncode != 0 and took < 5, (took, err)
    (line,) = [x for x in err.splitlines() if x.startswith("interrupted: ")]
    assert f"(cd {tmp_path})" in line and "sleep(120)" in line
    try:  # the child was stopped too (a zombie of nobody's is reaped by init)
        os.kill(child, 0)
        state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state == "Z", f"child {child} still running"
    except ProcessLookupError:
        pass
