# Benchmarks (not part of `all`): snakemake --cores 1 bench_decode


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
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/bench_decode.log",
    shell:
        "rnnsearch bench-decode {params.files} --checkpoint {input.checkpoint} --src {input.src}"
        " --src-vocab {input.src_vocab} --beams 1 12 --out {output} --log {log}"
