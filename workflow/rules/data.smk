# Stages 0-3: (download ->) corpus -> Moses tokenization -> the <=30 / <=50 word training sets.


rule download:
    output:
        "results/data/download/multi30k/{file}",
    params:
        stage=stage_params("download"),
        files=PARAMS,
    localrule: True  # cluster compute nodes often have no internet access; the login node fetches
    retries: 2  # on top of the stage's own retries with backoff; a partial file is resumed
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/download/multi30k/{file}.log",
    shell:
        "rnnsearch download {params.files} --file {wildcards.file} --out {output} --log {log}"


rule corpus:
    input:
        local=[f"{config['data']['local'][s]}.{lang}" for s in ("train", "dev", "test") for lang in (SRC, TGT)]
        if config["data"]["source"] == "local"
        else [],
        downloads=[f"results/data/download/multi30k/{f}" for f in multi30k_files()]
        if config["data"]["source"] == "multi30k"
        else [],
        code=stage_code("corpus"),
    output:
        expand("results/data/raw/{split}.{lang}", split=["train", "dev", "test"], lang=[SRC, TGT]),
        "results/data/raw/test.align" if config["data"]["source"] == "synthetic" else "results/data/raw/corpus.json",
    params:
        stage=stage_params("corpus"),
        files=PARAMS,
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/corpus.log",
    shell:
        "rnnsearch corpus {params.files} --out-dir results/data/raw --log {log}"
        + (" --downloads results/data/download/multi30k" if config["data"]["source"] == "multi30k" else "")


rule tokenize:
    input:
        text="results/data/raw/{split}.{lang}",
        code=stage_code("tokenize"),
    output:
        "results/data/tok/{split}.{lang}",
    params:
        stage=stage_params("tokenize"),
        files=PARAMS,
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/tokenize/{split}.{lang}.log",
    shell:
        "rnnsearch tokenize {params.files} --lang {wildcards.lang} --input {input.text} --output {output} --log {log}"


rule filter:
    input:
        src=f"results/data/tok/train.{SRC}",
        tgt=f"results/data/tok/train.{TGT}",
        code=stage_code("filter"),
    output:
        src=f"results/data/train{{maxlen}}.{SRC}",
        tgt=f"results/data/train{{maxlen}}.{TGT}",
        stats="results/data/train{maxlen}.json",
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/filter/train{maxlen}.log",
    shell:
        "rnnsearch filter --max-len {wildcards.maxlen} --src {input.src} --tgt {input.tgt}"
        " --out-src {output.src} --out-tgt {output.tgt} --stats {output.stats} --log {log}"
