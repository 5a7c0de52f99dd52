# Stage 4: shortlists of the K most frequent words per language (the paper: K = 30000), from per-shard word
# counts merged as sorted streams (memory grows with K and the shard count, not with the corpus); each training
# set as token ids that training memory-maps (binarize).


rule count:
    input:
        text="results/data/shards/clean/{scatteritem}.{lang}",
        code=stage_code("count"),
    output:
        "results/data/shards/counts/{scatteritem}.{lang}.counts",
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/count/{scatteritem}.{lang}.log",
    shell:
        "rnnsearch count --input {input.text} --output {output} --log {log}"


rule vocab:
    input:
        src=gather.shard(f"results/data/shards/counts/{{scatteritem}}.{SRC}.counts"),
        tgt=gather.shard(f"results/data/shards/counts/{{scatteritem}}.{TGT}.counts"),
        code=stage_code("vocab"),
    output:
        *SPM_FILES,
        src=f"results/data/vocab.{SRC}.tsv",
        tgt=f"results/data/vocab.{TGT}.tsv",
        stats="results/data/vocab.json",
    params:
        stage=stage_params("vocab"),
    resources:
        runtime=LONG_JOB_MINUTES,  # one job over the whole corpus (WMT'14: 850M words)
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/vocab.log",
    shell:
        "rnnsearch vocab --src {input.src} --tgt {input.tgt}"
        " --out-src {output.src} --out-tgt {output.tgt} --stats {output.stats} --log {log}"


rule binarize:
    input:
        src=f"results/data/train{{maxlen}}.{SRC}",
        tgt=f"results/data/train{{maxlen}}.{TGT}",
        src_vocab=f"results/data/vocab.{SRC}.tsv",
        tgt_vocab=f"results/data/vocab.{TGT}.tsv",
        spm=SPM_FILES,
        code=stage_code("binarize"),
    output:
        src="results/data/bin/train{maxlen}.src.bin",
        tgt="results/data/bin/train{maxlen}.tgt.bin",
        idx="results/data/bin/train{maxlen}.idx",
        header="results/data/bin/train{maxlen}.json",
    resources:
        runtime=LONG_JOB_MINUTES,  # one job over the whole training set (the paper's ≤50: 12M pairs)
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/binarize/train{maxlen}.log",
    shell:
        "rnnsearch binarize --src {input.src} --tgt {input.tgt} --src-vocab {input.src_vocab}"
        " --tgt-vocab {input.tgt_vocab} --out results/data/bin/train{wildcards.maxlen} --log {log}"


rule data_report:
    input:
        corpus="results/data/raw/corpus.json",
        tok=expand("results/data/tok/{split}.{lang}", split=["train", "dev", "test"], lang=[SRC, TGT]),
        clean=gather.shard("results/data/shards/clean/{scatteritem}.json"),
        tok_src=gather.shard(f"results/data/shards/tok/{{scatteritem}}.{SRC}"),
        tok_tgt=gather.shard(f"results/data/shards/tok/{{scatteritem}}.{TGT}"),
        # the tokenize stage's statistics, read beside each tokenized file
        tok_stats=[f for lang in (SRC, TGT) for f in gather.shard(f"results/data/shards/tok/{{scatteritem}}.{lang}.json")]
        + expand("results/data/tok/{split}.{lang}.json", split=["dev", "test"], lang=[SRC, TGT]),
        filters=expand("results/data/train{maxlen}.json", maxlen=TRAIN_LENS),
        binarized=expand("results/data/bin/train{maxlen}.json", maxlen=TRAIN_LENS),
        vocab=[f"results/data/vocab.{SRC}.tsv", f"results/data/vocab.{TGT}.tsv", *SPM_FILES],
        code=stage_code("data-report"),
    output:
        md="results/data/report.md",
        json="results/data/report.json",
        png="results/figures/lengths.png",
    params:
        stage=stage_params("data-report"),
    resources:
        runtime=LONG_JOB_MINUTES,  # one job over the whole corpus (WMT'14: 850M words)
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/data_report.log",
    shell:
        "rnnsearch data-report --corpus {input.corpus} --tok-dir results/data/tok"
        " --vocab-dir results/data --clean-stats {input.clean} --filter-stats {input.filters}"
        " --binarized {input.binarized}"
        " --tok-shards-src {input.tok_src} --tok-shards-tgt {input.tok_tgt}"
        " --out-md {output.md} --out-json {output.json} --out-png {output.png} --log {log}"
