# Stage 4: shortlists of the K most frequent words per language (the paper: K = 30000).


rule vocab:
    input:
        src=f"results/data/tok/train.{SRC}",
        tgt=f"results/data/tok/train.{TGT}",
        code=stage_code("vocab"),
    output:
        src=f"results/data/vocab.{SRC}.tsv",
        tgt=f"results/data/vocab.{TGT}.tsv",
        stats="results/data/vocab.json",
    params:
        stage=stage_params("vocab"),
        files=PARAMS,
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/vocab.log",
    shell:
        "rnnsearch vocab {params.files} --src {input.src} --tgt {input.tgt}"
        " --out-src {output.src} --out-tgt {output.tgt} --stats {output.stats} --log {log}"
