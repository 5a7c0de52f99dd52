# Benchmarks (not part of `all`): snakemake --cores 1 bench_decode; snakemake --cores 2 results/bench/train_paper_rnnsearch.json


rule bench_decode:
    input:
        checkpoint=f"results/models/{config['figures']['alignment_model']}/model.pt",
        src=f"results/data/tok/test.{SRC}",
        src_vocab=f"results/data/vocab.{SRC}.tsv",
        code=stage_code("bench-decode"),
    output:
        "results/bench/decode.json",
    params:
        stage=stage_params("bench-decode"),
        files=PARAMS,
    threads: config["decode"]["threads"]
    resources:
        **cluster_resources("decode"),
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/bench_decode.log",
    shell:
        "rnnsearch bench-decode {params.files} --checkpoint {input.checkpoint} --src {input.src}"
        " --src-vocab {input.src_vocab} --beams 1 12 --out {output} --log {log}"


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
