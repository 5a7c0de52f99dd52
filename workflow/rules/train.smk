# Stage 5: one training job per entry of `models` and replicate (App. B.2).


rule train:
    input:
        src_train=lambda w: train_file(w.model, SRC),
        tgt_train=lambda w: train_file(w.model, TGT),
        src_dev=f"results/data/tok/dev.{SRC}",
        tgt_dev=f"results/data/tok/dev.{TGT}",
        src_vocab=f"results/data/vocab.{SRC}.tsv",
        tgt_vocab=f"results/data/vocab.{TGT}.tsv",
        spm=SPM_FILES,
        binarized=lambda w: binarized_files(w.model),
        parent=lambda w: continued(w).get("stats", []),
        code=stage_code("train"),
    output:
        model="results/models/{model}/replicate{replicate}/model.pt",
        stats="results/models/{model}/replicate{replicate}/train_stats.json",
        curve="results/models/{model}/replicate{replicate}/learning_curve.tsv",
        validation="results/models/{model}/replicate{replicate}/validation.tsv",
    params:
        stage=lambda w: stage_params("train", w.model),
        launch=launcher("train"),
        binarized=lambda w: binarized_prefix(w.model),
        continues=lambda w: f" --continue-from {continued(w)['checkpoint']}" if continued(w) else "",
    threads: config["train"]["threads"] * config["train"]["processes"]
    resources:
        **train_resources(),
    wildcard_constraints:
        model="|".join(map(re.escape, TRAINED)),  # an entry that `decodes` another model trains nothing
    retries: 0  # the Snakefile's onstart sets train_retries() in the process that submits jobs
    priority: lambda w: train_cost(w.model)
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/train/{model}/replicate{replicate}.log",
    shell:
        "{params.launch}rnnsearch train --model {wildcards.model} --replicate {wildcards.replicate}"
        " --src-train {input.src_train} --tgt-train {input.tgt_train}"
        " --src-dev {input.src_dev} --tgt-dev {input.tgt_dev}"
        " --src-vocab {input.src_vocab} --tgt-vocab {input.tgt_vocab}"
        " --binarized {params.binarized} --out-dir results/models/{wildcards.model}/replicate{wildcards.replicate}"
        "{params.continues} --attempt {resources.attempt} --log {log}"
