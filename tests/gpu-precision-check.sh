#!/usr/bin/env bash
# The precision study's GPU half (docs/precision.md, docs/cluster.md), on a machine with one CUDA GPU and a CUDA
# build of PyTorch, from anywhere in the repository, in one call of about 8 minutes:
#
#     bash tests/gpu-precision-check.sh DATA [OUT]   # DATA: a folder holding newstest2012/13/14.{en,fr}
#                                                    # OUT: logs and JSON (default results/bench/gpu-precision)
#
# `rnnsearch rehearse` of paper.yaml's five models in paper.yaml's precision (bf16 autocast) on 1,000,000 generated
# pairs and the real dev and test text, 1,500 updates and 3 validations each (RNNsearch-50* 1,500 after
# RNNsearch-50's, which it continues): their updates/s at real sentence lengths, and the projection of Table 1's
# five trainings (docs/cluster.md's table). On stdout: each model's rate and hours, and the hours on this GPU
# against the goal of 6. Wheels in .whl/ (tests/gpu-wheels.sh makes them) are installed first, as gpu-check.sh
# does. Exits non-zero when the rehearsal failed.
set -uo pipefail
cd "$(dirname "$0")/.."
data=${1:?usage: bash tests/gpu-precision-check.sh DATA [OUT]}
out=${2:-results/bench/gpu-precision}
source tests/gpu-lib.sh

rm -rf "$out/rehearse"
step rehearse_bf16 540 python3 -m rnnsearch.cli rehearse --dev "$data/newstest2012" "$data/newstest2013" \
    --test "$data/newstest2014" --out-dir "$out/rehearse" --millions 1 --updates 1500 --validations 3 \
    --cores 16
if [ -s "$out/rehearse/rehearsal.json" ]; then
    cp "$out/rehearse/rehearsal.json" "$out/rehearsal-bf16.json"
    python3 - "$out/rehearsal-bf16.json" <<'PY' || status=1
import json, sys
r = json.load(open(sys.argv[1]))
p = r["projection"]
for m, x in p["models"].items():
    table2 = f"; at Table 2's {x['table2_updates']:,}: {x['table2_hours']} h" if "table2_hours" in x else ""
    print(f"{m}: {x.get('updates_per_s')} updates/s, {x.get('hours')} h ({x.get('trains', x['budget'])} updates)"
          f"{table2}")
print(f"{r['machine'].get('gpu')}: {p['one_device_hours']} h on one GPU (goal 6), "
      f"{p['one_model_per_device_hours']} h with one GPU per model; at Table 2's updates "
      f"{p['table2_one_device_hours']} h and {p['table2_one_model_per_device_hours']} h")
PY
fi
pack
exit $status
