"""`python -I -S kernel_launcher.py COMPILE_PY LOG COMMAND...`: every custom command of an
AOTriton build (RULE_LAUNCH_CUSTOM, kernel_launcher.cmake), once per job, so os and sys only.
A kernel job whose code object is there (staged or valid for its key: kernel_build.py drops
any other) is touched and skipped; another compiles with the key's Triton settings and logs
its -o path; other commands are exec'd unchanged (docs/kernel-check.md)."""

import os
import sys

ENV_FILE = "rocmfa-kernels-env.json"  # beside LOG: the key's Triton settings (kernel_build.py)


def job_environ(knobs: set[str], settings: dict[str, str]) -> dict[str, str]:
    """This environment without its Triton settings (the knobs Triton reads, any TRITON_*),
    then settings: a compile sees exactly what its key names."""
    kept = {k: v for k, v in os.environ.items() if k not in knobs and k[:7] != "TRITON_"}
    return {**kept, **settings}


def _output(command: list[str], compile_py: str) -> str | None:
    """-o's value when command runs compile_py, else None."""
    for i, arg in enumerate(command):
        if arg.endswith("compile.py") and os.path.realpath(arg) == compile_py:
            rest = command[i + 1 :]
            outs = [rest[j + 1] for j, f in enumerate(rest[:-1]) if f in ("-o", "--out_path")]
            return outs[0] if outs else None
    return None


def _ready(stem: str) -> bool:
    try:
        return os.path.getsize(stem + ".hsaco") > 0 and os.path.isfile(stem + ".json")
    except OSError:
        return False


def _environ(log: str) -> dict[str, str]:
    try:
        with open(os.path.join(os.path.dirname(log), ENV_FILE)) as f:
            import json

            given = json.load(f)
    except FileNotFoundError:
        return dict(os.environ)
    return job_environ(set(given["knobs"]), given["env"])


def _run(command: list[str], env: dict[str, str]) -> int:
    pid = os.posix_spawnp(command[0], command, env)
    while True:
        try:
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        except KeyboardInterrupt:  # ninja's Ctrl-C reaches the job too; wait for it
            continue


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        sys.stderr.write("usage: kernel_launcher.py COMPILE_PY LOG COMMAND...\n")
        return 2
    compile_py, log, command = argv[1], argv[2], argv[3:]
    out = _output(command, compile_py)
    if out is None:
        os.execvp(command[0], command)
    stem = os.path.splitext(out)[0]
    if _ready(stem):
        os.utime(stem + ".json")
        os.utime(stem + ".hsaco")
        return 0
    code = _run(command, _environ(log))
    if code == 0 and _ready(stem):
        try:  # one short line in append mode: parallel jobs' lines stay whole
            with open(log, "a") as f:
                f.write(out + "\n")
        except OSError as error:  # the kernel is built; only its trip to the store is lost
            sys.stderr.write(f"kernel launcher: {log}: {error.strerror}\n")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
