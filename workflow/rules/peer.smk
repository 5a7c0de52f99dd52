# The equal-time experiment against JoeyNMT 2.3.0 (not part of `all`): snakemake --cores 2 peer
# JoeyNMT trains on our tokenized data for as long as `peer.model` trained (its train_stats.json), then decodes
# the test set with decode.beam; every system is scored the same way in results/peer/comparison.md (our models:
# replicate 1).
PEER_MODEL = config["peer"]["model"]


rule peer_joeynmt:
    input:
        stats=f"{trained_dir(PEER_MODEL, 1)}/train_stats.json",
        train=[train_file(PEER_MODEL, SRC), train_file(PEER_MODEL, TGT)],
        dev=expand("results/data/tok/dev.{lang}", lang=[SRC, TGT]),
        test=expand("results/data/tok/test.{lang}", lang=[SRC, TGT]),
        code=stage_code("peer"),
    output:
        hyp="results/peer/joeynmt/test.hyp",
        tok="results/peer/joeynmt/test.hyp.tok",
        stats="results/peer/joeynmt/stats.json",
    params:
        stage=stage_params("peer"),
        python=lambda w: setting("peer.python", "peer_joeynmt"),
        train=lambda w, input: os.path.splitext(input.train[0])[0],  # JoeyNMT reads <prefix>.<lang>
        dev=lambda w, input: os.path.splitext(input.dev[0])[0],
        test=lambda w, input: os.path.splitext(input.test[0])[0],
    threads: config["train"]["threads"]
    conda:
        "../../envs/rnnsearch.yaml"  # ours; JoeyNMT runs in peer.python
    log:
        "results/logs/peer_joeynmt.log",
    shell:
        "rnnsearch peer --train-stats {input.stats} --train {params.train}"
        " --dev {params.dev} --test {params.test} --out-dir results/peer/joeynmt --log {log}"


rule peer:
    input:
        ours=expand("results/translations/{model}/replicate1/test.hyp", model=MODELS),
        stats=[f"{trained_dir(m, 1)}/train_stats.json" for m in MODELS],
        peer=rules.peer_joeynmt.output,
        ref=f"results/data/raw/test.{TGT}",
        code=stage_code("compare-peer"),
    output:
        "results/peer/comparison.json",
        "results/peer/comparison.md",
    params:
        stage=stage_params("compare-peer"),
        systems=" ".join(
            f"--system {m}=results/translations/{m}/replicate1/test.hyp={trained_dir(m, 1)}/train_stats.json"
            for m in MODELS
        ),
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/peer.log",
    shell:
        "rnnsearch compare-peer {params.systems}"
        " --system JoeyNMT-2.3.0=results/peer/joeynmt/test.hyp=results/peer/joeynmt/stats.json"
        " --ref {input.ref} --out-dir results/peer --log {log}"
