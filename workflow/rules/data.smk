# Stages 0-3: (download -> extract ->) corpus -> shard -> tokenize -> clean -> gather -> the <=30 / <=50 sets.
# The training text is cut into prepare.shards shards (scatter), tokenized and cleaned shard by shard (one job
# each, so a cluster does 850M words in parallel), and gathered back in order.

scattergather:
    shard=config["prepare"]["shards"],


rule download:
    """One file of a downloaded data.source (its record's `downloads`)."""
    output:
        f"results/data/download/{SOURCE.name}/{{file}}",
    params:
        stage=stage_params("download"),
    localrule: True  # cluster compute nodes often have no internet access; the login node fetches
    retries: 2  # on top of the stage's own retries with backoff; a partial file is resumed
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        f"results/logs/download/{SOURCE.name}/{{file}}.log",
    shell:
        "rnnsearch download --file {wildcards.file} --out {output} --log {log}"


rule extract:
    """The members stage 1 needs of one WMT'14 archive (a source whose record says `extracted`)."""
    input:
        archive="results/data/download/wmt14/{archive}",
        code=stage_code("extract"),
    output:
        directory("results/data/extract/wmt14/{archive}"),
    resources:
        runtime=LONG_JOB_MINUTES,  # one job over the whole corpus (WMT'14: 850M words)
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/extract/{archive}.log",
    shell:
        "rnnsearch extract --name {wildcards.archive} --archive {input.archive} --out-dir {output} --log {log}"


rule corpus:
    input:
        given=SOURCE.inputs(config["data"]),  # data.local's files
        fetched=[f"{FETCHED}/{f}" for f in SOURCE.downloads(config["data"])],
        code=stage_code("corpus"),
    output:
        expand("results/data/raw/{split}.{lang}", split=["train", "dev", "test"], lang=[SRC, TGT]),
        "results/data/raw/corpus.json",  # every source: switching data.source reruns the corpus by its params
        *(["results/data/raw/test.align"] if SOURCE.gold_links else []),
    params:
        stage=stage_params("corpus"),
        flags=f" --fetched {FETCHED}" if SOURCE.fetch else "",
    resources:
        runtime=LONG_JOB_MINUTES,  # one job over the whole corpus (WMT'14: 850M words)
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/corpus.log",
    shell:
        "rnnsearch corpus --out-dir results/data/raw{params.flags} --log {log}"


rule shard:
    input:
        src=f"results/data/raw/train.{SRC}",
        tgt=f"results/data/raw/train.{TGT}",
        code=stage_code("shard"),
    output:
        src=scatter.shard(f"results/data/shards/raw/{{scatteritem}}.{SRC}"),
        tgt=scatter.shard(f"results/data/shards/raw/{{scatteritem}}.{TGT}"),
    resources:
        runtime=LONG_JOB_MINUTES,  # one job over the whole corpus (WMT'14: 850M words)
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/shard.log",
    shell:
        "rnnsearch shard --src {input.src} --tgt {input.tgt} --out-src {output.src} --out-tgt {output.tgt} --log {log}"


rule tokenize_shard:
    input:
        text="results/data/shards/raw/{scatteritem}.{lang}",
        code=stage_code("tokenize"),
    output:
        text="results/data/shards/tok/{scatteritem}.{lang}",
        stats="results/data/shards/tok/{scatteritem}.{lang}.json",
    params:
        stage=stage_params("tokenize"),
        # the LIUM bitexts are Moses-tokenized already: their XML escapes are undone, their tokens normalised
        pretokenized=" --pretokenized" if PRETOKENIZED_TRAIN else "",
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/tokenize/train.{scatteritem}.{lang}.log",
    shell:
        "rnnsearch tokenize --lang {wildcards.lang} --input {input.text} --output {output.text}"
        " --stats {output.stats}{params.pretokenized} --log {log}"


rule tokenize:
    input:
        text="results/data/raw/{split}.{lang}",
        code=stage_code("tokenize"),
    output:
        text="results/data/tok/{split}.{lang}",
        stats="results/data/tok/{split}.{lang}.json",
    wildcard_constraints:
        split="dev|test",
    params:
        stage=stage_params("tokenize"),
    localrule: True  # a few thousand sentences: seconds where Snakemake runs, not a Slurm job's queue wait
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/tokenize/{split}.{lang}.log",
    shell:
        "rnnsearch tokenize --lang {wildcards.lang} --input {input.text} --output {output.text}"
        " --stats {output.stats} --log {log}"


rule clean:
    input:
        src=f"results/data/shards/tok/{{scatteritem}}.{SRC}",
        tgt=f"results/data/shards/tok/{{scatteritem}}.{TGT}",
        code=stage_code("clean"),
    output:
        src=f"results/data/shards/clean/{{scatteritem}}.{SRC}",
        tgt=f"results/data/shards/clean/{{scatteritem}}.{TGT}",
        stats="results/data/shards/clean/{scatteritem}.json",
    params:
        stage=stage_params("clean"),
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/clean/{scatteritem}.log",
    shell:
        "rnnsearch clean --src {input.src} --tgt {input.tgt} --out-src {output.src}"
        " --out-tgt {output.tgt} --stats {output.stats} --log {log}"


rule gather:
    input:
        shards=gather.shard("results/data/shards/clean/{scatteritem}.{{lang}}"),
        code=stage_code("gather"),
    output:
        "results/data/tok/train.{lang}",
    resources:
        runtime=LONG_JOB_MINUTES,  # one job over the whole corpus (WMT'14: 850M words)
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/gather/train.{lang}.log",
    shell:
        "rnnsearch gather --inputs {input.shards} --output {output} --log {log}"


rule filter:
    input:
        src=f"results/data/tok/train.{SRC}",
        tgt=f"results/data/tok/train.{TGT}",
        code=stage_code("filter"),
    output:
        src=f"results/data/train{{maxlen}}.{SRC}",
        tgt=f"results/data/train{{maxlen}}.{TGT}",
        stats="results/data/train{maxlen}.json",
    resources:
        runtime=LONG_JOB_MINUTES,  # one job over the whole corpus (WMT'14: 850M words)
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/filter/train{maxlen}.log",
    shell:
        "rnnsearch filter --max-len {wildcards.maxlen} --src {input.src} --tgt {input.tgt}"
        " --out-src {output.src} --out-tgt {output.tgt} --stats {output.stats} --log {log}"
