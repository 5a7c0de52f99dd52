# Stage 6: beam search on the test set, All sentences and the No-UNK subset ([UNK] forbidden), per replicate.


rule translate:
    input:
        checkpoint=lambda w: f"{trained_dir(w.model, w.replicate)}/model.pt",
        src=f"results/data/tok/test.{SRC}",
        ref=f"results/data/tok/test.{TGT}",
        src_vocab=f"results/data/vocab.{SRC}.tsv",
        tgt_vocab=f"results/data/vocab.{TGT}.tsv",
        spm=SPM_FILES,
        code=stage_code("translate"),
    output:
        hyp_tok="results/translations/{model}/replicate{replicate}/test.hyp.tok",
        hyp="results/translations/{model}/replicate{replicate}/test.hyp",
        nounk_tok="results/translations/{model}/replicate{replicate}/nounk.hyp.tok",
        nounk="results/translations/{model}/replicate{replicate}/nounk.hyp",
        nounk_ids="results/translations/{model}/replicate{replicate}/nounk.json",
        attention="results/translations/{model}/replicate{replicate}/attention.npz",
        stats="results/translations/{model}/replicate{replicate}/decode_stats.json",
    params:
        stage=lambda w: stage_params("translate", w.model),
        launch=launcher("decode"),
    threads: config["decode"]["threads"] * config["decode"]["processes"]
    resources:
        **cluster_resources("decode", config["decode"]["processes"]),
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/translate/{model}/replicate{replicate}.log",
    shell:
        "{params.launch}rnnsearch translate --model {wildcards.model} --checkpoint {input.checkpoint}"
        " --src {input.src} --ref {input.ref}"
        " --src-vocab {input.src_vocab} --tgt-vocab {input.tgt_vocab}"
        " --out-dir results/translations/{wildcards.model}/replicate{wildcards.replicate} --log {log}"


rule translate_extra:
    """Each model (its replicate 1) on each extra test set (extra_tests), raw text in, detokenized translations out, with the
    decode settings of the main test set (the model's own, rcfg.decoding)."""
    input:
        checkpoint=lambda w: f"{trained_dir(w.model, 1)}/model.pt",
        src=lambda w: f"{EXTRA_TESTS[w.testset]}.{SRC}",
        code=stage_code("translate"),
    output:
        "results/extra/{testset}/{model}.hyp",
    params:
        # the search flags: decode.threads (speed only, rcfg.SPEED_ONLY) is not among them, and reruns nothing
        search=lambda w: search_flags(rcfg.decoding(config, w.model)),
        punct="" if config["tokenize"]["normalize_punctuation"] else " --no-normalize-punctuation",
        langs=f"--src-lang {SRC} --tgt-lang {TGT}",
    threads: config["decode"]["threads"]
    resources:
        **cluster_resources("decode"),
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/translate_extra/{testset}/{model}.log",
    shell:
        "rnnsearch translate --checkpoint {input.checkpoint} --input {input.src} --output {output}"
        " {params.search}{params.punct} {params.langs} --log {log}"

