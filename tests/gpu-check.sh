#!/usr/bin/env bash
# The GPU check, on a machine with a CUDA GPU and a CUDA build of PyTorch, from anywhere in the repository:
#
#     bash tests/gpu-check.sh [OUT]          # OUT: where the logs and JSON go (default results/bench/gpu)
#
# 1. the tests marked `cuda` (`pytest -m cuda`: fused recurrences against autograd in fp32 and bf16, a training
#    interrupted by SIGTERM and resumed, beam search against the CPU's, the tiny pipeline with device: cuda, the
#    graphed update against the eager one);
# 2. the paper-size training benchmark (App. A: 620/1000/1000/500, K = 30,000; batches of 80 pairs of 50 words)
#    of RNNsearch and RNNencdec in tf32 and bf16, eagerly and replayed from a CUDA graph (--graph), each in its
#    own process, utilisation against the GEMM rate measured in that process, and RNNsearch at 320 pairs; RNNsearch
#    bf16 graphed once more with the Triton step kernels off (RNNSEARCH_TRITON=0), for their effect;
# 3. with PEER_DIR (a copy of the peer benchmark whose joeynmt_rnnsearch.yaml says use_cuda: True), RAW_DATA (the
#    corpora its prep_data.py reads) and JoeyNMT 2.3.0 importable by PEER_PYTHON (default python3): both systems
#    trained and decoded side by side on the GPU (bench-peer --device cuda, Multi30k);
# 4. RNNsearch's update profiled (bench-profile, bf16);
# 5. with NEWSTEST=<prefix> (<prefix>.en, <prefix>.fr: tokenized newstest2014): greedy and beam-12 search of both
#    paper-size models on it (bench-search, random weights, every output the references' mean length);
# 6. the tables on stdout and everything in OUT/gpu.json.
# The most telling measurements run first (RNNsearch in bf16, eager and graphed), so that a run cut short says most.
#
# Each step has a time limit and its own log in OUT; with PACK=<file.tgz>, OUT is packed into it after every step.
# The code runs from src/ (nothing is installed into the machine's Python). Wheels in .whl/, the packages that
# PyTorch's own environment lacks (tests/gpu-wheels.sh: snakemake, jsonschema, sacremoses and their needs;
# JoeyNMT and its missing needs), are installed first into a private folder. Exits non-zero when a test or a
# benchmark failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/bench/gpu}
source tests/gpu-lib.sh

train() {  # train ARCH PRECISION BATCH [--graph]
    local tag="train_$1_$2_b$3${4:+_graph}"
    step "$tag" 150 python3 -m rnnsearch.cli bench-train --arch "$1" --size paper --batch "$3" --length 50 \
        --steps 20 --threads 4 --device cuda --precision "$2" ${4:+--graph} --out "$out/$tag.json"
}

train rnnsearch bf16 80
train rnnsearch bf16 80 graph
step train_rnnsearch_bf16_b80_graph_no_triton 150 env RNNSEARCH_TRITON=0 python3 -m rnnsearch.cli bench-train \
    --arch rnnsearch --size paper --batch 80 --length 50 --steps 20 --threads 4 --device cuda --precision bf16 --graph \
    --out "$out/train_rnnsearch_bf16_b80_graph_no_triton.json"
step pytest 240 python3 -m pytest -o addopts="" -m cuda -p no:cacheprovider -q -rs --durations=15 tests
if [ -n "${PEER_DIR:-}" ] && [ -n "${RAW_DATA:-}" ]; then
    # 800 updates, 400 untimed: our graphed runs record a graph at each padded shape's second minibatch, about
    # half of Multi30k's 23 in the first 400 updates, as in a training's first minutes (on an H200: JoeyNMT's
    # training 137 s with its start, ours 20 to 60 s a run; the whole step about 7 minutes)
    step peer 540 python3 -m rnnsearch.cli bench-peer --peer-script "$PEER_DIR/peer_joeynmt.sh" \
        --peer-python "${PEER_PYTHON:-python3}" --raw "$RAW_DATA" --datasets multi30k --updates 800 --warmup 400 \
        --rounds 1 --threads 4 --device cuda --out "$out/peer.json" --md "$out/peer.md" --peer-log "$out/peer_joeynmt.log"
else
    echo "peer: skipped (PEER_DIR or RAW_DATA not set)"
fi
train rnnsearch tf32 80
train rnnsearch tf32 80 graph
train rnnencdec bf16 80
train rnnencdec bf16 80 graph
train rnnencdec tf32 80
train rnnsearch bf16 320
train rnnsearch bf16 320 graph
# where a paper-size update's time goes: kernels, busy and GEMM time, launch gap, the two floors
step profile_rnnsearch_bf16 120 python3 -m rnnsearch.cli bench-profile --arch rnnsearch --size paper --batch 80 \
    --length 50 --steps 2 --threads 4 --device cuda --precision bf16 --out "$out/profile_rnnsearch_bf16.json"
if [ -n "${NEWSTEST:-}" ]; then
    for arch in rnnsearch rnnencdec; do
        step "search_$arch" 150 python3 -m rnnsearch.cli bench-search --arch "$arch" --size paper --src \
            "$NEWSTEST.en" --ref "$NEWSTEST.fr" --beams 1 12 --batch 80 --threads 4 --device cuda --precision tf32 \
            --out "$out/search_$arch.json"
    done
else
    echo "search: skipped (NEWSTEST not set)"
fi
python3 tests/gpu_report.py "$out" || status=1
pack
exit $status
