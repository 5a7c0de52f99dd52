#!/usr/bin/env bash
# The data-parallel graphs' GPU check (training/parallel_graphs.py), on a machine with one CUDA GPU and a CUDA build
# of PyTorch, from anywhere in the repository, in one call of a few minutes:
#
#     bash tests/gpu-dp-check.sh [OUT]       # OUT: where the logs and JSON go (default results/bench/gpu-dp)
#
# 1. the tests marked `cuda` (`pytest -m cuda`), test_parallel_graphs.py's first: two processes on one GPU (gloo),
#    the graphed phases against the same phases run eagerly; a 2-process graphed training SIGTERMed and resumed;
# 2. bench-dp-graphs at the paper's size (App. A, K = 30,000; 80 pairs of 50 words per process), 1 and 2
#    processes on the one GPU (RNNSEARCH_DIST_BACKEND=gloo), bf16 then fp32: each process's replay timed alone,
#    the all-reduce apart, and the 4- and 8-GPU projections for NVLink and 100 Gb/s Ethernet from those figures;
# 3. the verdicts of issue #61's acceptance on stdout: replay within 1.25 x the 1-process graphed update, the
#    8-GPU NVLink projection at least 6 x one GPU.
# Wheels in .whl/ (tests/gpu-wheels.sh makes them) are installed first into a private folder, as
# gpu-check.sh does. Exits non-zero when a test, the benchmark or a verdict failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/bench/gpu-dp}
source tests/gpu-lib.sh

step pytest_dp 300 python3 -m pytest -o addopts="" -m cuda -p no:cacheprovider -q -rs --durations=10 \
    tests/test_parallel_graphs.py tests/test_graphs.py
export RNNSEARCH_DIST_BACKEND=gloo
step bench_dp_graphs 420 python3 -m rnnsearch.cli bench-dp-graphs --size paper --batch 80 --length 50 --steps 20 \
    --threads 4 --device cuda --precisions bf16 fp32 --processes 2 --out "$out/dp_graphs.json"
unset RNNSEARCH_DIST_BACKEND
step pytest_rest 240 python3 -m pytest -o addopts="" -m cuda -p no:cacheprovider -q -rs --durations=10 tests \
    --deselect tests/test_parallel_graphs.py --deselect tests/test_graphs.py
if [ -s "$out/dp_graphs.json" ]; then
    python3 - "$out/dp_graphs.json" <<'PY' || status=1
import json, sys
r = json.load(open(sys.argv[1]))
ok = True
for precision, p in r["projections"].items():
    nvlink8 = p["devices"]["8"]["nvlink4"]
    verdicts = [p["replay_ratio"] <= 1.25, nvlink8["speedup"] >= 6]
    ok &= all(verdicts)
    print(f"{precision}: t1 {p['t1_s']:.4f} s, replay alone {p['t_replay_s']:.4f} s ({p['replay_ratio']:.2f} x, "
          f"{'ok' if verdicts[0] else 'over 1.25'}); 8 GPUs NVLink {nvlink8['speedup']:.2f} x "
          f"({'ok' if verdicts[1] else 'under 6'}): {nvlink8['arithmetic']}")
sys.exit(0 if ok else 1)
PY
fi
pack
exit $status
