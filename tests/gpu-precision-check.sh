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

rehearse "$data" 540 --millions 1 --updates 1500 --validations 3
pack
exit $status
