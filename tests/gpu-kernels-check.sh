#!/usr/bin/env bash
# The recurrence kernels' GPU check (model/triton_kernels.py, attention_kernels.py, fused_gpu.py) and the speed
# goals of training and decoding, on a machine with one CUDA GPU and a CUDA build of PyTorch, from anywhere in the
# repository, in one call of at most BUDGET seconds (default 540: a device call of 10 minutes with a minute to
# spare):
#
#     DATA=<folder of newstest2012/13/14.{en,fr}> BASE=<src/ of another commit> bash tests/gpu-kernels-check.sh [OUT]
#     # OUT: where the logs and JSON go (default results/bench/gpu-kernels); DATA and BASE may be left out
#
# The most telling first, so that a call cut short says most:
# 1. the `cuda` tests of the kernels: the fused recurrences against autograd in fp32 and bf16, the graphed update
#    against the eager one (test_fused.py, test_triton.py, test_graphs.py);
# 2. paper-size RNNsearch (App. A: 620/1000/1000/500, K = 30,000; pairs of 50 words) in bf16 at batch 80 replayed
#    from a CUDA graph (bench-train --graph): the goal of 10,000 pairs/s;
# 3. with DATA, `rnnsearch rehearse` of paper.yaml's five trainings in bf16 (gpu-precision-check.sh's, smaller:
#    250,000 generated pairs, 1,000 updates and 2 validations a model) and the projection of Table 1's five
#    trainings from their rates at real lengths: the goal of 6 hours on one GPU;
# 4. with DATA, beam-12 decoding of newstest2014 (bench-search, TF32; with BASE that code's too): the goal of
#    decoding no slower (the kernels are the training's);
# 5. with BASE, bf16 at batch 80 of that code too (the before of a before-and-after); where the graphed bf16
#    update's time goes (bench-profile --graph: its kernels by name); TF32 at batch 80, bf16 at batch 320;
# 6. on stdout a table: seconds per update, pairs/s, and against the goal of 10,000 pairs/s.
# A step that would start with less than half its time limit left of BUDGET is skipped, saying so (gpu-lib.sh).
# With PACK=<file.tgz>, OUT is packed into it after every step (of the rehearsal's workspace only its logs).
# Wheels in .whl/ are installed first, as gpu-check.sh does. Exits non-zero when a test or a benchmark failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/bench/gpu-kernels}
base=${BASE:+$(cd "$BASE" && pwd)}  # absolute: the steps run its code from another PYTHONPATH
export BUDGET=${BUDGET:-540}
source tests/gpu-lib.sh

step pytest_kernels 180 python3 -m pytest -o addopts="" -m cuda -p no:cacheprovider -q -rs --durations=10 \
    tests/test_fused.py tests/test_triton.py tests/test_graphs.py
train() {  # train TAG PRECISION BATCH [SRC]
    step "$1" 120 env PYTHONPATH="${4:-$PWD/src}:${PYTHONPATH#*:}" python3 -m rnnsearch.cli bench-train \
        --arch rnnsearch --size paper --batch "$3" --length 50 --steps 20 --threads 4 --device cuda \
        --precision "$2" --graph --out "$out/$1.json"
}
train train_bf16_b80_graph bf16 80
if [ -n "${DATA:-}" ]; then
    rehearse "$DATA" 420 --millions 0.25 --updates 1000 --validations 2
else
    echo "rehearsal: skipped (DATA not set)"
fi
search() {  # search TAG SRC: beam-12 decoding of newstest2014 (bench-search), the code of SRC
    step "$1" 90 env PYTHONPATH="$2:${PYTHONPATH#*:}" python3 -m rnnsearch.cli bench-search --arch rnnsearch \
        --size paper --src "$out/newstest2014.tok.en" --ref "$out/newstest2014.tok.fr" --beams 12 --batch 80 \
        --threads 4 --device cuda --precision tf32 --out "$out/$1.json"
}
if [ -n "${DATA:-}" ]; then
    step tokenize_newstest2014 60 python3 -c 'import sys
from rnnsearch.data.text import tokenize_lines
for lang in ("en", "fr"):
    lines = open(f"{sys.argv[1]}/newstest2014.{lang}", encoding="utf-8").read().splitlines()
    with open(f"{sys.argv[2]}/newstest2014.tok.{lang}", "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in tokenize_lines(lines, lang)))
' "$DATA" "$out"
    search search_rnnsearch "$PWD/src"
    if [ -n "$base" ]; then search base_search_rnnsearch "$base"; fi
fi
if [ -n "$base" ]; then
    train base_train_bf16_b80_graph bf16 80 "$base"
fi
step profile_bf16_b80_graph 120 python3 -m rnnsearch.cli bench-profile --arch rnnsearch --size paper --batch 80 \
    --length 50 --steps 3 --threads 4 --device cuda --precision bf16 --graph --out "$out/profile_bf16_b80_graph.json"
gzip -f "$out/profile_bf16_b80_graph.trace.json" 2>/dev/null
train train_tf32_b80_graph tf32 80
train train_bf16_b320_graph bf16 320
python3 - "$out" <<'PY' || status=1
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for f in sorted(out.glob("*train_*.json")):
    r = json.loads(f.read_text())
    print(f"{f.stem:28} {r['seconds_per_update']:.4f} s/update  {r['sentences_per_s']:9.1f} pairs/s  "
          f"utilisation {r['utilisation']:.3f}  graph vs eager {r['graph_relative_update_difference']:.2g}")
for f in sorted(out.glob("*search_rnnsearch.json")):
    r = json.loads(f.read_text())
    print(f"{f.stem:28} " + ", ".join(f"beam {x['beam']}: {x['sentences_per_s']:.1f} sentences/s" for x in r["runs"]))
p = out / "profile_bf16_b80_graph.json"
if p.exists():
    r = json.loads(p.read_text())
    print(f"profile: {r['seconds_per_update']:.4f} s/update, {r['operations_per_update']:.0f} kernels, busy "
          f"{r['busy_seconds_per_update']:.4f} s, GEMM {r['gemm_seconds_per_update']:.4f} s")
    for t in r["top_operations"]:
        print(f"  {t['ms_per_update']:7.3f} ms {t['calls_per_update']:6.1f} x  {t['name'][:70]}")
PY
pack
exit $status
