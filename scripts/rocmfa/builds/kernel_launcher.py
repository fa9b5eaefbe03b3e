"""`python -I -S kernel_launcher.py COMPILE_PY ENV_FILE COMMAND...` runs every custom command of
an AOTriton build (RULE_LAUNCH_CUSTOM): a kernel job whose code object is there is skipped, another
runs with exactly its key's Triton settings (ENV_FILE), the rest unchanged. docs/kernel-check.md"""

import os
import sys

compile_py, env_file, *command = sys.argv[1:]
kernel = any(a.endswith("compile.py") and os.path.realpath(a) == compile_py for a in command)
if not kernel or "-o" not in command[:-1]:
    os.execvp(command[0], command)
stem = os.path.splitext(command[command.index("-o") + 1])[0]
ready = os.path.isfile(stem + ".json") and os.path.isfile(stem + ".hsaco")
if ready and os.path.getsize(stem + ".hsaco") > 0:  # --timeout > 0 may leave an empty one
    os.utime(stem + ".json")
    os.utime(stem + ".hsaco")
    sys.exit(0)
try:
    with open(env_file) as f:
        import json

        given = json.load(f)
except FileNotFoundError:  # ninja run by hand: the environment as it is
    os.execvp(command[0], command)
# This environment without Triton's settings (its knobs, any TRITON_*), then the key's.
kept = {k: v for k, v in os.environ.items() if k not in given["knobs"] and k[:7] != "TRITON_"}
os.execvpe(command[0], command, {**kept, **given["env"]})
