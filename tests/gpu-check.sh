#!/usr/bin/env bash
# The GPU check, on a machine with a CUDA GPU and a CUDA build of PyTorch, from anywhere in the repository:
#
#     bash tests/gpu-check.sh [OUT]          # OUT: where the logs and JSON go (default results/bench/gpu)
#
# 1. the tests marked `cuda` (`pytest -m cuda`: fused recurrences against autograd in fp32 and bf16, a training
#    interrupted by SIGTERM and resumed, beam search against the CPU's, the tiny pipeline with device: cuda);
# 2. the paper-size training benchmark (App. A: 620/1000/1000/500, K = 30,000; batches of 80 pairs of 50 words)
#    of RNNsearch and RNNencdec in fp32, tf32 and bf16, each in its own process, utilisation against the GEMM
#    rate measured in that process; RNNsearch's update profiled (bench-profile) in tf32 and bf16; and RNNsearch
#    in bf16 at 320 pairs per batch;
# 3. one table of it all on stdout.
#
# The code runs from src/ (nothing is installed into the machine's Python). Wheels in .whl/, the packages that
# PyTorch's own environment lacks (jsonschema and what it needs, sacremoses), are installed first into a private
# folder. Exits non-zero when a test or a benchmark failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/bench/gpu}
mkdir -p "$out"
site=$(mktemp -d)
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl || exit
fi
export PYTHONPATH="$PWD/src:$site" PYTHONUNBUFFERED=1
python3 -c 'import sys, torch
torch.cuda.is_available() or sys.exit(f"no CUDA GPU visible to torch {torch.__version__}")
print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")' | tee "$out/device.txt"
[ -s "$out/device.txt" ] || exit 1

status=0
python3 -m pytest -o addopts="" -m cuda -p no:cacheprovider -q -rs tests 2>&1 | tee "$out/pytest.log" || status=1
for arch in rnnsearch rnnencdec; do
    for precision in fp32 tf32 bf16; do
        python3 -m rnnsearch.cli bench-train --arch "$arch" --size paper --batch 80 --length 50 --steps 10 \
            --threads 4 --device cuda --precision "$precision" --out "$out/train_${arch}_${precision}.json" \
            >> "$out/bench.log" 2>&1 || { echo "bench-train $arch $precision failed: $out/bench.log"; status=1; }
    done
done
# where a paper-size update's time goes: kernels, busy and GEMM time, launch gap, the two floors
for precision in tf32 bf16; do
    python3 -m rnnsearch.cli bench-profile --arch rnnsearch --size paper --batch 80 --length 50 --steps 2 \
        --threads 4 --device cuda --precision "$precision" --out "$out/profile_rnnsearch_${precision}.json" \
        >> "$out/bench.log" 2>&1 || { echo "bench-profile rnnsearch $precision failed: $out/bench.log"; status=1; }
done
# a token budget of 2014's memory limit against one of today's: 320 pairs of 50 words, bf16
python3 -m rnnsearch.cli bench-train --arch rnnsearch --size paper --batch 320 --length 50 --steps 10 --threads 4 \
    --device cuda --precision bf16 --out "$out/train_rnnsearch_bf16_b320.json" >> "$out/bench.log" 2>&1 \
    || { echo "bench-train rnnsearch bf16 batch 320 failed: $out/bench.log"; status=1; }

python3 - "$out" <<'EOF'
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
print(f"\n{(out / 'device.txt').read_text().strip()}")
tests = [line for line in (out / "pytest.log").read_text().splitlines() if " passed" in line or " failed" in line]
print(f"pytest -m cuda: {tests[-1].strip('= ') if tests else 'no summary (see pytest.log)'}\n")
print("| model | precision | batch | pairs/s | target words/s | s/update | GFLOP/s | GEMM GFLOP/s | utilisation | peak MB |")
print("|---|---|---|---|---|---|---|---|---|---|")
for p in sorted(out.glob("train_*.json")):
    r = json.loads(p.read_text())
    print(f"| {r['arch']} | {r['precision']} | {r['batch']} | {r['sentences_per_s']:,.0f} | {r['target_words_per_s']:,.0f} | "
          f"{r['seconds_per_update']} | {r['gflops_per_s']:,.0f} | {r['gemm_peak_gflops']:,.0f} | "
          f"{r['utilisation']:.1%} | {r['peak_cuda_mb']:,.0f} |")
print("\n| profile | precision | s/update | kernels | busy s | GEMM s | launch gap s | floor: arithmetic s | floor: launches s |")
print("|---|---|---|---|---|---|---|---|---|")
for p in sorted(out.glob("profile_*[0-9a-z].json")):
    if p.name.endswith(".trace.json"):
        continue
    r = json.loads(p.read_text())
    print(f"| {r['arch']} | {r['precision']} | {r['seconds_per_update']:.4f} | {r['operations_per_update']:,.0f} | "
          f"{r['busy_seconds_per_update']:.4f} | {r['gemm_seconds_per_update']:.4f} | "
          f"{r['launch_gap_seconds_per_update']:.4f} | {r['floor_arithmetic_seconds']:.4f} | "
          f"{r['floor_launch_seconds']:.4f} |")
    print("  top: " + "; ".join(f"{o['name'][:60]} {o['ms_per_update']} ms" for o in r["top_operations"][:5]))
EOF
exit $status
