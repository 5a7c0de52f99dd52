# Benchmarks (not part of `all`): snakemake --cores 1 bench_decode; snakemake --cores 2 results/bench/train_paper_rnnsearch.json


rule bench_decode:
    input:
        checkpoint=f"{trained_dir(ALIGN_MODEL, 1)}/model.pt",
        src=f"results/data/tok/test.{SRC}",
        src_vocab=f"results/data/vocab.{SRC}.tsv",
        spm=SPM_FILES,
        code=stage_code("bench-decode"),
    output:
        "results/bench/decode.json",
    params:
        stage=stage_params("bench-decode"),
    threads: config["decode"]["threads"]
    resources:
        **cluster_resources("decode"),
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/bench_decode.log",
    shell:
        "rnnsearch bench-decode --checkpoint {input.checkpoint} --src {input.src}"
        " --src-vocab {input.src_vocab} --beams 1 12 --out {output} --log {log}"


rule bench_search:
    """Greedy and beam-12 search speed of a model size on the tokenized test set (random weights, every output the
    references' mean length), e.g. `snakemake --cores 2 results/bench/search_paper_rnnsearch.json`."""
    input:
        src=f"results/data/tok/test.{SRC}",
        ref=f"results/data/tok/test.{TGT}",
        code=stage_code("bench-search"),
    output:
        "results/bench/search_{size}_{arch}.json",
    wildcard_constraints:
        size="paper|bench",
        arch="rnnsearch|rnnencdec|luong",
    threads: 256  # all of --cores
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/bench_search_{size}_{arch}.log",
    shell:
        "rnnsearch bench-search --arch {wildcards.arch} --size {wildcards.size} --src {input.src} --ref {input.ref}"
        " --beams 1 12 --threads {threads} --out {output} --log {log}"


rule bench_train:
    """Training speed and peak memory at a fixed size, e.g. `snakemake --cores 2 results/bench/train_paper_rnnsearch.json`
    (paper: App. A sizes, 30k shortlists; bench: the peer benchmark's sizes), batches of 80 pairs of 50 words."""
    input:
        code=stage_code("bench-train"),
    output:
        "results/bench/train_{size}_{arch}.json",
    wildcard_constraints:
        size="paper|bench",
        arch="rnnsearch|rnnencdec|luong",
    threads: 256  # all of --cores: Snakemake caps a job's threads at the cores it is given
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/bench_train_{size}_{arch}.log",
    shell:
        "rnnsearch bench-train --arch {wildcards.arch} --size {wildcards.size} --batch 80 --length 50 --steps 5"
        " --threads {threads} --out {output} --log {log}"


rule bench_profile:
    """Where one training update's time goes and its arithmetic and launch floors, e.g. `snakemake --cores 2
    results/bench/profile_paper_rnnsearch_fp32.json` (batches of 80 pairs of 50 words; bf16 and, on a GPU, tf32)."""
    input:
        code=stage_code("bench-profile"),
    output:
        json="results/bench/profile_{size}_{arch}_{precision}.json",
        trace="results/bench/profile_{size}_{arch}_{precision}.trace.json",
    wildcard_constraints:
        size="paper|bench",
        arch="rnnsearch|rnnencdec|luong",
        precision="fp32|tf32|bf16",
    threads: 256  # all of --cores
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/bench_profile_{size}_{arch}_{precision}.log",
    shell:
        "rnnsearch bench-profile --arch {wildcards.arch} --size {wildcards.size} --precision {wildcards.precision}"
        " --batch 80 --length 50 --steps 2 --threads {threads} --out {output.json} --log {log}"


rule bench_ddp:
    """Data-parallel training on this machine: 1 process against 2 under torchrun, at the peer benchmark's size
    (`snakemake --cores 2 results/bench/ddp.json`), and the projected 8-GPU all-reduce of a paper-size update."""
    input:
        code=stage_code("bench-ddp"),
    output:
        "results/bench/ddp.json",
    threads: 256  # all of --cores
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/bench_ddp.log",
    shell:
        "rnnsearch bench-ddp --size bench --batch 80 --length 50 --steps 3 --threads {threads} --processes 2"
        " --out {output} --log {log}"



rule bench_memory:
    """A training update of RNNsearch with each alignment model with memory against the paper's RNNsearch on the
    CPU, in one process, at the paper's and the embedded corpus's sizes (`snakemake --cores 2
    results/bench/memory.json`; docs/benchmarks.md)."""
    input:
        code=stage_code("bench-memory"),
    output:
        "results/bench/memory.json",
    threads: 256  # all of --cores
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/bench_memory.log",
    shell:
        "rnnsearch bench-memory --sizes paper embedded --length 50 --steps 5 --threads {threads} --out {output}"
        " --log {log}"


rule bench_dp_graphs:
    """Data-parallel updates from CUDA graphs, 1 process against 2 under torchrun, in bf16 and fp32 at the paper's
    size on a GPU (`snakemake --cores 2 results/bench/dp_graphs.json`; two processes on one GPU need
    RNNSEARCH_DIST_BACKEND=gloo), and the 4- and 8-GPU projections from what it measured."""
    input:
        code=stage_code("bench-dp-graphs"),
    output:
        "results/bench/dp_graphs.json",
    threads: 256  # all of --cores
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/bench_dp_graphs.log",
    shell:
        "rnnsearch bench-dp-graphs --size paper --batch 80 --length 50 --steps 20 --threads {threads} --device cuda"
        " --precisions bf16 fp32 --processes 2 --out {output} --log {log}"

# Real text for the data benchmark: `bench.data` when it is set (Europarl v7 and Multi30k raw; a Moses-tokenized
# Europarl sample for the LIUM path), else the embedded corpus.
BENCH_DATA, BENCH_PEER = config["bench"]["data"], config["bench"]["peer"]
if BENCH_DATA:
    BENCH_RAW = [(lang, f"{BENCH_DATA}/{f}.{lang}") for f in ("europarl_v7_samples/cs124sampleB", "multi30k_enfr/train")
                 for lang in ("en", "fr")]
    BENCH_PRETOK = [(lang, f"{BENCH_DATA}/europarl_v7_samples/cs124sampleA.tok.{lang}") for lang in ("en", "fr")]
else:
    BENCH_RAW = [(lang, f"results/data/raw/train.{lang}") for lang in (SRC, TGT)]
    BENCH_PRETOK = [(lang, f"results/data/tok/train.{lang}") for lang in (SRC, TGT)]


rule bench_data:
    """Tokenization throughput per core and shortlist memory on real text, with the WMT'14 projection:
    `snakemake --cores 1 bench_data`."""
    input:
        text=[f for _, f in BENCH_RAW + BENCH_PRETOK],
        code=stage_code("bench-data"),
    output:
        json="results/bench/data.json",
        md="results/bench/data.md",
    params:
        raw=" ".join(f"--raw {lang} {f}" for lang, f in BENCH_RAW),
        pretok=" ".join(f"--pretokenized {lang} {f}" for lang, f in BENCH_PRETOK),
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/bench_data.log",
    shell:
        "rnnsearch bench-data {params.raw} {params.pretok} --out {output.json} --md {output.md} --log {log}"


rule bench_explorer:
    """The explorer page at the paper's scale (3,003 generated sentences, 5 models): size, build and load time in
    headless Chromium: `snakemake --cores 1 bench_explorer`."""
    input:
        code=stage_code("bench-explorer"),
    output:
        json="results/bench/explorer.json",
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/bench_explorer.log",
    shell:
        "rnnsearch bench-explorer --out {output.json} --log {log}"


rule bench_scale:
    """The data path at millions of pairs: every data stage and training start-up (1 and 2 processes) on generated
    WMT-shaped corpora of 1M and 4M pairs, with a projection to 12M and 36M: `snakemake --cores 2 bench_scale`."""
    input:
        code=stage_code("bench-scale"),
    output:
        json="results/bench/scale.json",
        md="results/bench/scale.md",
    threads: 256  # all of --cores: the per-shard jobs run side by side, two training processes
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/bench_scale.log",
    shell:
        "rnnsearch bench-scale --out {output.json} --md {output.md} --log {log}"


rule bench_scaling:
    """Training time and peak memory per update against sentence length (10 to 80 words), RNNsearch and RNNencdec
    at the peer benchmark's sizes, batches of 80: `snakemake --cores 2 bench_scaling`."""
    input:
        code=stage_code("bench-scaling"),
    output:
        json="results/bench/scaling.json",
        png="results/bench/scaling.png",
    threads: 256  # all of --cores
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/bench_scaling.log",
    shell:
        "rnnsearch bench-scaling --size bench --batch 80 --steps 2 --lengths 10 20 40 60 80"
        " --threads {threads} --out {output.json} --figure {output.png} --log {log}"


rule bench_peer:
    """Training and fixed-length decoding side by side with JoeyNMT 2.3.0 (the peer benchmark, `bench.peer`),
    alternating A, B, A, B on Multi30k and Europarl ≤50: `snakemake --cores 2 bench_peer` (about 40 minutes on 2
    cores). Needs peer.python, bench.peer and bench.data."""
    input:
        script=lambda w: f"{setting('bench.peer', 'bench_peer')}/peer_joeynmt.sh",
        code=stage_code("bench-peer"),
    output:
        json="results/bench/peer.json",
        md="results/bench/peer.md",
    params:
        python=lambda w: setting("peer.python", "bench_peer"),
        raw=lambda w: setting("bench.data", "bench_peer"),
    threads: 256  # all of --cores, for both sides
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        ours="results/logs/bench_peer.log",
        peer="results/logs/bench_peer_joeynmt.log",
    shell:
        "rnnsearch bench-peer --peer-script {input.script} --raw {params.raw} --peer-python {params.python}"
        " --threads {threads} --out {output.json} --md {output.md} --log {log.ours} --peer-log {log.peer}"


rule bench:
    """Every speed and memory benchmark of the model in one run, and results/bench/summary.md:
    `snakemake --cores 2 bench` (about an hour on 2 cores; the peer comparison when `bench.peer` is set)."""
    input:
        train=expand("results/bench/train_{size}_{arch}.json", size=["bench", "paper"], arch=["rnnsearch", "rnnencdec"]),
        scaling=rules.bench_scaling.output.json,
        peer=rules.bench_peer.output.md if BENCH_PEER else [],
        code=stage_code("bench"),
    output:
        "results/bench/summary.md",
    params:
        peer=lambda wc, input: f"--peer {input.peer}" if input.peer else "",
    localrule: True
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/bench.log",
    shell:
        "rnnsearch bench --train {input.train} --scaling {input.scaling} {params.peer} --out {output} --log {log}"
