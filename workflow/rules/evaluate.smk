# Stages 7-9: BLEU per model, Tables 1-2, Figures 2-3, the alignment error rate and the results page.


rule score:
    input:
        src=f"results/data/tok/test.{SRC}",
        ref_tok=f"results/data/tok/test.{TGT}",
        ref=f"results/data/raw/test.{TGT}",
        hyps=rules.translate.output,
        code=stage_code("score"),
    output:
        "results/scores/{model}/replicate{replicate}.json",
    params:
        stage=stage_params("score"),
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/score/{model}/replicate{replicate}.log",
    shell:
        "rnnsearch score --model {wildcards.model} --src {input.src} --ref-tok {input.ref_tok}"
        " --ref {input.ref} --hyp-dir results/translations/{wildcards.model}/replicate{wildcards.replicate}"
        " --out {output} --log {log}"


rule tables:
    input:
        scores=each_replicate("results/scores/{model}/replicate{replicate}.json"),
        stats=expand("results/models/{model}/replicate{replicate}/train_stats.json", model=TRAINED, replicate=REPLICATES),
        hyps=each_replicate("results/translations/{model}/replicate{replicate}/test.hyp.tok"),
        ref_tok=f"results/data/tok/test.{TGT}",
        code=stage_code("tables"),
    output:
        report(
            multiext("results/tables/table1", ".csv", ".md", ".rst", "_replicates.csv"),
            caption="../report/table1.rst",
            category="Tables",
        ),
        report(
            multiext("results/tables/table2", ".csv", ".md", ".rst"),
            caption="../report/table2.rst",
            category="Tables",
        ),
        report(
            multiext("results/tables/alignment", ".csv", ".md", ".rst"),
            caption="../report/alignment.rst",
            category="Tables",
        ),
        "results/tables/metrics.json",  # the headline metrics of DVC (Table 1's BLEU means)
    params:
        stage=stage_params("tables"),
        scores=replicate_patterns("results/scores/{model}/replicate{replicate}.json"),
        stats=replicate_patterns("results/models/{model}/replicate{replicate}/train_stats.json", TRAINED),
        hyps=replicate_patterns("results/translations/{model}/replicate{replicate}/test.hyp.tok"),
    localrule: True  # reads scores and statistics: seconds where Snakemake runs, not a Slurm job's queue wait
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/tables.log",
    shell:
        "rnnsearch tables --scores {params.scores} --train-stats {params.stats} --hyps {params.hyps}"
        " --ref-tok {input.ref_tok} --out-dir results/tables --log {log}"


rule figures:
    input:
        scores=each_replicate("results/scores/{model}/replicate{replicate}.json"),
        attention=f"results/translations/{ALIGN_MODEL}/replicate1/attention.npz",
        hyp=f"results/translations/{ALIGN_MODEL}/replicate1/test.hyp.tok",
        nounk=f"results/translations/{ALIGN_MODEL}/replicate1/nounk.json",
        src=f"results/data/tok/test.{SRC}",
        code=stage_code("figures"),
    output:
        report(
            multiext("results/figures/bleu_by_length", ".png", ".pdf", ".csv"),
            caption="../report/figure2.rst",
            category="Figures",
        ),
        report(
            multiext("results/figures/alignment_by_length", ".png", ".pdf"),
            caption="../report/alignment_by_length.rst",
            category="Figures",
        ),
        "results/figures/bleu_by_length_models.csv",  # Figure 2's means, a column per model: `dvc plots show`
        "results/figures/dvc_page.html",  # the page `dvc plots show` draws in, Vega inlined (.dvc/config)
        report(
            expand("results/figures/alignment_{letter}.png", letter=ALIGN_LETTERS),
            caption="../report/figure3.rst",
            category="Figures",
        ),
    params:
        stage=stage_params("figures"),
        scores=replicate_patterns("results/scores/{model}/replicate{replicate}.json"),
    localrule: True  # reads scores and one model's attention: seconds where Snakemake runs, not a Slurm job
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/figures.log",
    shell:
        "rnnsearch figures --scores {params.scores} --attention {input.attention}"
        " --src {input.src} --hyp {input.hyp} --nounk {input.nounk} --out-dir results/figures --log {log}"


if AER_GOLD:

    rule aer:
        input:
            checkpoint=f"{trained_dir(ALIGN_MODEL, 1)}/model.pt",
            src=f"results/data/tok/test.{SRC}",
            ref=f"results/data/tok/test.{TGT}",
            src_vocab=f"results/data/vocab.{SRC}.tsv",
            tgt_vocab=f"results/data/vocab.{TGT}.tsv",
            spm=SPM_FILES,
            gold=AER_GOLD,
            code=stage_code("aer"),
        output:
            report("results/scores/aer.json", caption="../report/aer.rst", category="Alignment"),
        resources:
            **cluster_resources("decode"),
        params:
            stage=stage_params("aer"),
        conda:
            "../../envs/rnnsearch.yaml"
        log:
            "results/logs/aer.log",
        shell:
            "rnnsearch aer --checkpoint {input.checkpoint} --src {input.src} --ref {input.ref}"
            " --src-vocab {input.src_vocab} --tgt-vocab {input.tgt_vocab} --gold {input.gold} --out {output}"
            " --log {log}"


rule explorer:
    input:
        scores=expand("results/scores/{model}/replicate1.json", model=MODELS),
        hyps=expand("results/translations/{model}/replicate1/test.hyp", model=MODELS),
        hyps_tok=expand("results/translations/{model}/replicate1/test.hyp.tok", model=MODELS),
        attention=expand("results/translations/{model}/replicate1/attention.npz", model=MODELS),
        src=f"results/data/raw/test.{SRC}",
        ref=f"results/data/raw/test.{TGT}",
        src_tok=f"results/data/tok/test.{SRC}",
        ref_tok=f"results/data/tok/test.{TGT}",
        tgt_vocab=f"results/data/vocab.{TGT}.tsv",
        figure2="results/figures/bleu_by_length.csv",
        code=stage_code("explorer"),
    output:
        report("results/explorer.html", caption="../report/explorer.rst", category="Explorer"),
    params:
        stage=stage_params("explorer"),
        hyp_dirs=" ".join(f"{m}=results/translations/{m}/replicate1" for m in MODELS),
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/explorer.log",
    shell:
        "rnnsearch explorer --scores {input.scores} --hyp-dirs {params.hyp_dirs} --src {input.src} --ref {input.ref}"
        " --src-tok {input.src_tok} --ref-tok {input.ref_tok} --tgt-vocab {input.tgt_vocab}"
        " --figure2 {input.figure2} --out {output} --log {log}"


rule report:
    input:
        table1="results/tables/table1.md",
        table2="results/tables/table2.md",
        alignment_table="results/tables/alignment.md",
        figure2="results/figures/bleu_by_length.png",
        alignment_figure="results/figures/alignment_by_length.png",
        alignments=expand("results/figures/alignment_{letter}.png", letter=ALIGN_LETTERS),
        scores=each_replicate("results/scores/{model}/replicate{replicate}.json"),
        src=f"results/data/raw/test.{SRC}",
        ref=f"results/data/raw/test.{TGT}",
        hyps=expand("results/translations/{model}/replicate1/test.hyp", model=MODELS),
        aer=["results/scores/aer.json"] if AER_GOLD else [],
        explorer="results/explorer.html",
        code=stage_code("report"),
    output:
        "results/report.md",
    params:
        stage=stage_params("report"),
        scores=replicate_patterns("results/scores/{model}/replicate{replicate}.json"),
        hyps=lambda w, input: " ".join(f"{m}={h}" for m, h in zip(MODELS, input.hyps)),
        aer=lambda w, input: f"--aer {input.aer}" if input.aer else "",
    localrule: True  # reads tables and figures: a second where Snakemake runs, not a Slurm job's queue wait
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/report.log",
    shell:
        "rnnsearch report --table1 {input.table1} --table2 {input.table2} --figure2 {input.figure2}"
        " --alignments {input.alignments} --scores {params.scores} --src {input.src} --ref {input.ref}"
        " --hyps {params.hyps} {params.aer} --explorer {input.explorer} --alignment-table {input.alignment_table}"
        " --alignment-figure {input.alignment_figure}"
        " --out {output} --log {log}"


rule score_extra:
    input:
        hyps=expand("results/extra/{testset}/{model}.hyp", testset=list(EXTRA_TESTS), model=MODELS),
        refs=[f"{prefix}.{TGT}" for prefix in EXTRA_TESTS.values()],
        code=stage_code("score-extra"),
    output:
        "results/tables/extra_tests.md",
        "results/tables/extra_tests.json",
    params:
        entries=" ".join(
            f"--entry {t} {m} results/extra/{t}/{m}.hyp {p}.{TGT}" for t, p in EXTRA_TESTS.items() for m in MODELS
        ),
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/score_extra.log",
    shell:
        "rnnsearch score-extra {params.entries} --out-dir results/tables --log {log}"


rule compare:  # not part of `all`: results/compare/<a>_vs_<b>/comparison.md (the precision study, docs/precision.md)
    input:
        runs=lambda w: expand(
            ["results/scores/{m}/replicate{r}.json", "results/models/{m}/replicate{r}/validation.tsv"],
            m=[w.a, w.b],
            r=REPLICATES,
        ),
        code=stage_code("compare"),
    output:
        multiext("results/compare/{a}_vs_{b}/", "comparison.md", "comparison.json", "dev_nll.png"),
    wildcard_constraints:  # trainings (an entry that `decodes` another shares its trainings: no independent arm)
        a="|".join(map(re.escape, TRAINED)),
        b="|".join(map(re.escape, TRAINED)),
    params:
        stage=stage_params("compare"),
    conda:
        "../../envs/rnnsearch.yaml"
    log:
        "results/logs/compare/{a}_vs_{b}.log",
    shell:
        "rnnsearch compare --a {wildcards.a} --b {wildcards.b} --out-dir results/compare/{wildcards.a}_vs_{wildcards.b}"
        " --log {log}"
