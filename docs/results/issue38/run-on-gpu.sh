#!/bin/bash
# issue 38 GPU run 2: seed vs bench walls + two A/A sessions of four runs, llm suite, validate.
cd "$(dirname "$0")"
LOG=$OUT/log.txt
mkdir -p /tmp/aaA /tmp/aaB
{
nvidia-smi --query-gpu=name,clocks.max.memory,clocks.max.sm --format=csv
echo "== walls (session A)"
python3 tests/perf/bench_vs_seed.py seed/05-attention-bench.py --runs 2 --bench-runs 4 --out-dir /tmp/aaA
echo "== session B"
TIMEFORMAT="bench run B wall %R s"
for i in 1 2 3 4; do time (python3 scripts/probes/bench.py --json /tmp/aaB/aa$i.json > /dev/null 2>&1); done
for S in A B; do echo "== A/A $S"
for p in "1 2" "1 3" "1 4" "2 3" "2 4" "3 4"; do set -- $p
  python3 scripts/probes/bench.py --compare /tmp/aa$S/aa$1.json /tmp/aa$S/aa$2.json | grep -E " slower| faster|matching cases"; done; done
python3 - <<'PY'
import json
for s in 'AB':
  for i in range(1,5):
    d=json.load(open(f'/tmp/aa{s}/aa{i}.json'))
    r=[x for x in d['results'] if x['status']=='ok']
    x=[x['median_ms'] for x in r if x['size']=='XLarge' and x['backend']=='flash' and x['pass']=='fwd' and x['causal']]
    print(s,i,'wall_s',d['wall_s'],'profiled',sum(1 for x in r if x['kernel_ms'] is not None),'launch_bound',sum(1 for x in r if x['launch_bound']),'memory-bound',sum(1 for x in r if x['bound']=='memory'),'XLarge causal flash fwd',x)
PY
echo "== llm"
python3 scripts/probes/bench.py --suite llm --json $OUT/llm.json 2>/dev/null | grep -E "^SDPA|^peak|^bytes|decode-128k|size |prefill-32k-d128 .*flash"
echo "== validate"
python3 scripts/probes/validate.py --json $OUT/validate.json 2>/dev/null | grep -E "FAIL|PASS" | tail -12
python3 scripts/probes/validate.py --quick 2>/dev/null | tail -1
} > $LOG 2>&1
tar -C /tmp -czf $OUT/aaA.tar.gz aaA; tar -C /tmp -czf $OUT/aaB.tar.gz aaB
