"""Run the REAL test/tune_flash.py of an AOTriton checkout (upstream 0.11b, 972223c5; the
retired gfx908 port has the same) on an argv, up to its UI entry, without a GPU:
`python tune_flash_probe.py <tune_flash.py> ARGS...` prints JSON
{"args": <parsed namespace>, "app_run": <keyword arguments of app.run>}.

Its own code runs unchanged: the module body (including VRAM_CAP_IN_GB's probe), parse() on
ARGS with argparse and its checks, and main(). Stand-ins replace only what needs the GPU build:
the `mptune` package (imports pyaotriton), the GPU queries rocm_arch.rocm_get_gpuarch
(rocm_agent_enumerator) and amdsmi (no GPU), and, inside main(), the tuner graph and the
Textual app, whose run() records how it was called.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path


class _Anything:
    def __init__(self, *args, **kwargs) -> None:
        pass

    def __getattr__(self, name):
        return _Anything()

    def __call__(self, *args, **kwargs):
        return _Anything()


def _stub_modules() -> None:
    mptune = types.ModuleType("mptune")
    core = types.ModuleType("mptune.core")
    for name in (
        "ArgArchVerbose",
        "Monad",
        "MonadService",
        "MonadMessage",
        "MonadAction",
        "TunerManager",
        "TuningResult",
        "KernelIndexProress",
    ):
        setattr(core, name, type(name, (), {"__init__": lambda self, *a, **k: None}))
    core.CPPTUNE_SKIP_KERNELS = ()
    mptune.core = core
    mptune.tui = types.SimpleNamespace(TunerApp=_Anything)
    rocm_arch = types.ModuleType("rocm_arch")
    rocm_arch.rocm_get_gpuarch = lambda: "gfx90a"
    rocm_arch.rocm_get_allarch = lambda: ["gfx90a:sramecc+:xnack-"]
    # 0.11b's module body asks amdsmi for the VRAM size (the port guards it, 8c55a2d): no GPU
    amdsmi = types.ModuleType("amdsmi")
    amdsmi.AmdSmiException = type("AmdSmiException", (Exception,), {})
    amdsmi.amdsmi_init = amdsmi.amdsmi_shut_down = lambda: None
    amdsmi.amdsmi_get_processor_handles = lambda: []
    amdsmi.amdsmi_get_gpu_vram_usage = lambda device: {"vram_total": 0}
    sys.modules.update(
        {"mptune": mptune, "mptune.core": core, "rocm_arch": rocm_arch, "amdsmi": amdsmi}
    )


def main() -> None:
    script = Path(sys.argv[1])
    argv = sys.argv[2:]
    _stub_modules()
    namespace = {"__name__": "tune_flash_real", "__file__": str(script)}
    code = compile(script.read_text(), str(script), "exec")
    sys.argv = [str(script), *argv]
    exec(code, namespace)  # the real module body; not __main__, so main() waits
    args = namespace["parse"]()
    calls: list[dict] = []

    class Manager:
        def __init__(self, parsed) -> None:
            self.args = parsed

        def build_graph(self) -> None:
            pass

        def launch_graph(self) -> None:
            pass

    class App:
        def run(self, **kwargs) -> None:
            calls.append(kwargs)

    namespace["FlashTunerManager"] = Manager
    namespace["make_ui"] = lambda manager: App()
    namespace["main"]()  # the real main(): parse() again, then app.run(...)
    parsed = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    print(json.dumps({"args": parsed, "app_run": calls}, default=str))


if __name__ == "__main__":
    main()
