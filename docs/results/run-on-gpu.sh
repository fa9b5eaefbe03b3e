#!/usr/bin/env bash
# The GPU run behind docs/results: backend_check (plain, head_dim 512, flash runtime-disabled),
# bench (device and wall timing, --sustained), bench_crosscheck in both modes, GPU state before
# and after. Usage: docs/results/run-on-gpu.sh OUT_DIR  (from the repository root; needs torch
# with a CUDA or ROCm device, matplotlib for the plots). Writes OUT_DIR/gpu-run.log and the
# result files; every step runs even when an earlier one fails (their exit codes are logged).
set -u
out=${1:?usage: run-on-gpu.sh OUT_DIR}
mkdir -p "$out"
log="$out/gpu-run.log"
probes=scripts/probes
step() { printf '\n=================== %s  (%s)\n' "$1" "$(date -u +%T)" | tee -a "$log"; }
run() { "$@" 2>&1 | tee -a "$log"; echo "exit ${PIPESTATUS[0]}" | tee -a "$log"; }
smi() {
    command -v nvidia-smi >/dev/null || { echo "nvidia-smi: not found" | tee -a "$log"; return; }
    run nvidia-smi --format=csv --query-gpu=name,driver_version,clocks.current.sm,clocks.max.sm,power.draw,power.limit,pstate,temperature.gpu,clocks_event_reasons.active
}

date -u | tee "$log"
run python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda or torch.version.hip, torch.cuda.get_device_name())"
smi
step "torch.cuda.init alone"
run bash -c 'time python3 -c "import torch; torch.cuda.init()"'

step "backend_check plain"
run python3 $probes/backend_check.py --json "$out/backend_check.json"
step "backend_check --shape 1,4,256,512"
run python3 $probes/backend_check.py --shape 1,4,256,512 --json "$out/backend_check_hd512.json"
step "backend_check flash runtime-disabled (sitecustomize)"
site=$(mktemp -d)
echo "import torch; torch.backends.cuda.enable_flash_sdp(False)" >"$site/sitecustomize.py"
run env PYTHONPATH="$site" python3 $probes/backend_check.py --json "$out/backend_check_flash_disabled.json"

step "bench default suite"
run bash -c "time python3 $probes/bench.py --out-dir '$out'"
step "bench --timing wall"
run bash -c "time python3 $probes/bench.py --timing wall --json '$out/bench_wall.json' --csv '$out/bench_wall.csv' --plot '$out/bench_wall.png'"
step "crosscheck wall (bench's timer and the harness in turns)"
run bash -c "time python3 $probes/bench_crosscheck.py --bench-json '$out/bench_wall.json' --json '$out/crosscheck_wall.json'"
step "crosscheck device (bench's timer and the harness in turns)"
run bash -c "time python3 $probes/bench_crosscheck.py --bench-json '$out/bench.json' --json '$out/crosscheck.json'"
step "bench XLarge --sustained 5"
run python3 $probes/bench.py --sizes XLarge --backends flash,cudnn --causal no --passes fwd,bwd --sustained 5 --json "$out/bench_sustained.json"
step "nvidia-smi after"
smi
date -u | tee -a "$log"
