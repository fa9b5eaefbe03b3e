#!/usr/bin/env bash
# The GPU run behind docs/results' issue 32 files (two device calls, here in one script):
# A/A (the default bench suite 4x, back to back), A/B (the same 2x with every SDPA call computed
# twice: ab-forward-twice/sitecustomize.py), backend_check, validate, --suite llm, the default
# suite once more and bench_crosscheck with the profiler clock. Usage, from the repository
# root: docs/results/run-i32-on-gpu.sh OUT_DIR (needs torch with a CUDA or ROCm device).
set -u
out=${1:?usage: run-i32-on-gpu.sh OUT_DIR}
mkdir -p "$out"
P=scripts/probes
export PYTHONUNBUFFERED=1
{
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,pstate --format=csv
for i in 1 2 3 4; do
  echo "== A/A run $i $(date -u +%T)"
  python3 $P/bench.py --json "$out/aa$i.json" --csv "$out/aa$i.csv" 2>&1 | tail -4
done
for i in 1 2; do
  echo "== A/B run $i (forward twice) $(date -u +%T)"
  PYTHONPATH=$PWD/docs/results/ab-forward-twice python3 $P/bench.py --json "$out/ab$i.json" 2>&1 | tail -4
done
echo "== backend_check $(date -u +%T)"
python3 $P/backend_check.py --json "$out/backend_check_i32.json" 2>&1 | tail -3
echo "== validate $(date -u +%T)"
python3 $P/validate.py --json "$out/validate_i32.json" 2>&1 | tail -3
echo "== bench --suite llm $(date -u +%T)"
python3 $P/bench.py --suite llm --json "$out/bench_llm.json" --csv "$out/bench_llm.csv" 2>&1
echo "== bench default (for the crosscheck) $(date -u +%T)"
python3 $P/bench.py --json "$out/bench_i32.json" 2>&1 | tail -2
echo "== crosscheck device $(date -u +%T)"
python3 $P/bench_crosscheck.py --bench-json "$out/bench_i32.json" --json "$out/crosscheck_profiler.json" 2>&1
date -u
} 2>&1 | tee "$out/gpu-run-i32.log"
