"""Stage 8a: the paper's Table 1 (BLEU, All and No UNK) and Table 2 (learning statistics) as CSV and Markdown,
each model's mean ± sd over its replicates; beside them, the alignment table: dropped and attended-again source
words and repetition by source length (rnnsearch.evaluation.coverage)."""

from __future__ import annotations

from pathlib import Path
from statistics import fmean

import pandas as pd

from rnnsearch.evaluation.names import paper_names
from rnnsearch.evaluation.replicates import by_model, each_replicate, mean_sd, shown, welch_p
from rnnsearch.evaluation.score import check_aligned
from rnnsearch.settings import ScoreConfig
from rnnsearch.textio import InputError, atomic_path, read_json, read_lines, write_json_atomic


def _write(numbers: pd.DataFrame, display: pd.DataFrame, stem: Path, notes: list[str]) -> None:
    """The numbers as CSV; as Markdown, the table as shown (mean ± sd, p-values with four digits) and its notes;
    the same as reStructuredText (the landing page of Snakemake's HTML report includes it)."""
    with atomic_path(stem.with_suffix(".csv")) as tmp:
        numbers.to_csv(tmp, index=False)
    with atomic_path(stem.with_suffix(".md")) as tmp:
        tmp.write_text(display.to_markdown(index=False, floatfmt=".2f", disable_numparse=True) + "\n\n"
                       + "\n".join(notes) + "\n", encoding="utf-8")
    escaped = display.map(lambda x: x.replace("\\", "\\\\").replace("*", "\\*") if isinstance(x, str) else x)
    with atomic_path(stem.with_suffix(".rst")) as tmp:
        tmp.write_text(escaped.to_markdown(index=False, tablefmt="rst", floatfmt=".2f", disable_numparse=True)
                       + "\n", encoding="utf-8")


def paired_bootstrap(names: list[str], hyps: list[list[str]], refs: list[str], samples: int) -> dict[str, float]:
    """p-values of sacreBLEU's paired bootstrap resampling (Koehn 2004) of each system against the first,
    on tokenized BLEU. sacreBLEU's statistic is |ΔBLEU|, and p = (c + 1) / (samples + 1) with c the resamples
    whose centred |ΔBLEU| exceeds the observed one: for two systems of equal BLEU it gives its smallest value,
    1 / (samples + 1), though there is no difference at all; such a system gets p = 1."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    test = PairedTest(list(zip(names, hyps)), {"BLEU": BLEU(tokenize="none", force=True)}, references=[refs],
                      test_type="bs", n_samples=samples)
    _, results = test()
    base = results["BLEU"][0].score
    return {name: 1.0 if r.score == base else r.p_value for name, r in zip(names[1:], results["BLEU"][1:])}


BLEU_COLUMNS = {"All (tokenized BLEU)": "bleu_tok_all", "No UNK (tokenized BLEU)": "bleu_tok_nounk",
                "All (sacreBLEU)": "sacrebleu_all", "No UNK (sacreBLEU)": "sacrebleu_nounk"}


def replicate_p_values(groups: dict[str, list[dict]], hyps: dict[int, list[str]], refs: list[str],
                       samples: int) -> dict[tuple[str, int], float]:
    """{(model, replicate index): p} of the paired bootstrap of each model's r-th replicate against the
    baseline's (the first model's) r-th replicate; `hyps` maps id(score record) to its translations."""
    baseline, *others = groups
    p: dict[tuple[str, int], float] = {}
    for r, base in enumerate(groups[baseline]):
        systems = [(m, groups[m][r]) for m in others if r < len(groups[m])]
        if systems:
            names = [baseline] + [m for m, _ in systems]
            found = paired_bootstrap(names, [hyps[id(base)]] + [hyps[id(s)] for _, s in systems], refs, samples)
            p.update({(m, r): found[m] for m in found})
    return p


def table1_replicates(groups: dict[str, list[dict]], p: dict) -> pd.DataFrame:
    """Every replicate's scores, and its paired bootstrap p against the baseline's replicate of the same index."""
    baseline = next(iter(groups))
    return pd.DataFrame([{"Model": m, "Replicate": r + 1, "Seed": s.get("seed"),
                          **{col: s.get(key) for col, key in BLEU_COLUMNS.items()},
                          f"p vs {baseline}": p.get((m, r))}
                         for m, runs in groups.items() for r, s in enumerate(runs)])


def table1(groups: dict[str, list[dict]], p: dict | None = None, samples: int = 0,
           names: dict[str, str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Table 1, one row per model: the mean of each BLEU over its replicates and (for two or more) the sample
    standard deviation (the `sd` columns); with bootstrap p-values, the largest over replicates; with three or more
    replicates of the model and of the baseline, Welch's t-test of their All BLEU across seeds. Returns the numbers,
    the table as shown (mean ± sd, models by `names`: the paper's) and its notes."""
    baseline = next(iter(groups))
    name = (names or {}).get
    shown_base = name(baseline, baseline)
    welch = all(len(runs) >= 3 for runs in groups.values())
    several = any(len(runs) > 1 for runs in groups.values())
    rows, display = [], []
    for m, runs in groups.items():
        row, show = {"Model": m, "Replicates": len(runs)}, {"Model": name(m, m)}
        if several:
            show["Replicates"] = len(runs)
        for col, key in BLEU_COLUMNS.items():
            values = [s[key] for s in runs if s.get(key) is not None]  # a metric newer than a score: "–"
            mean, sd = mean_sd(values) if values else (None, None)
            row[col], row[col + " sd"] = mean, sd
            show[col] = shown(mean, sd) if mean is not None else "–"
        row["No-UNK sentences"] = show["No-UNK sentences"] = runs[0]["nounk_sentences"]
        row["Test sentences"] = show["Test sentences"] = runs[0]["sentences"]
        if p:
            found = [p[(m, r)] for r in range(len(runs)) if (m, r) in p]
            row[f"p vs {baseline}"] = max(found) if found else None
            show[f"p vs {shown_base}"] = f"{max(found):.4f}" if found else "–"
        if welch:
            a, b = [s["bleu_tok_all"] for s in runs], [s["bleu_tok_all"] for s in groups[baseline]]
            row[f"Welch p vs {baseline}"] = welch_p(a, b) if m != baseline else None
            show[f"Welch p vs {shown_base}"] = f"{row[f'Welch p vs {baseline}']:.4f}" if m != baseline else "–"
        rows.append(row)
        display.append(show)
    signatures = sorted({s["sacrebleu_signature"] for runs in groups.values() for s in runs})
    first = next(iter(groups.values()))[0]
    notes = ["Tokenized BLEU: " + first["tokenized_bleu_definition"] + ".",
             "sacreBLEU: detokenized output against the raw references; signature: " + "; ".join(signatures) + ".",
             "No UNK: sentences without out-of-shortlist words in source and reference, decoded with [UNK] forbidden."]
    if several:
        notes.append("Mean ± sample standard deviation over each model's replicates (trainings with seeds seed, "
                     "seed + 1, …; params.yaml's `replicates`); every replicate in table1_replicates.csv.")
    if p:
        notes.append(f"p vs {shown_base}: sacreBLEU's paired bootstrap resampling ({samples} samples) of tokenized BLEU "
                     f"on All sentences against {shown_base} (`{baseline}`), the first model of params.yaml's `models`"
                     + (", replicate against replicate of the same index: the largest p" if len(groups[baseline]) > 1
                        else "") + ". The test is two-sided (its statistic is the absolute BLEU difference): a small p "
                     f"says the two differ, the BLEU columns say which is ahead; its smallest value is "
                     f"1/{samples + 1} = {1 / (samples + 1):.4f}; a model of exactly the baseline's BLEU has p = 1.")
    if welch:
        notes.append(f"Welch p vs {shown_base}: Welch's t-test (two-sided) of All tokenized BLEU across replicates.")
    return pd.DataFrame(rows), pd.DataFrame(display), notes


TABLE2_MEANS = {"Updates": "updates", "Epochs": "epochs", "Hours": "hours", "Train NLL": "train_nll",
                "Dev NLL": "dev_nll", "Dev BLEU": "dev_bleu", "Selected update": "selected_update"}


def table2(groups: dict[str, list[dict]],
           names: dict[str, str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Table 2, one row per model: each learning statistic's mean (and sd) over the replicates. Shown (not in
    the CSV) in minutes where every model trained for under an hour, else in hours; models by `names`."""
    minutes = all(fmean(s["hours"] for s in runs) < 1 for runs in groups.values())
    rows, display = [], []
    for m, runs in groups.items():
        row, show = {"Model": m, "Replicates": len(runs)}, {"Model": (names or {}).get(m, m)}
        for col, key in TABLE2_MEANS.items():
            mean, sd = mean_sd([s[key] for s in runs])
            row[col], row[col + " sd"] = mean, sd
            if key == "hours" and minutes:
                col, mean, sd = "Minutes", mean * 60, None if sd is None else sd * 60
            show[col] = shown(mean, sd, 0 if key in ("updates", "selected_update") else 2)
        for col, value in (("Device", " / ".join(dict.fromkeys(s["device"] for s in runs))),
                           ("Early stop", f"{sum(s['early_stopped'] for s in runs)} of {len(runs)}" if len(runs) > 1
                            else ("yes" if runs[0]["early_stopped"] else "no")),
                           ("Parameters", runs[0]["parameters"])):
            row[col] = show[col] = value
        rows.append(row)
        display.append(show)
    notes = ["NLL per sentence (summed over words, </s> included), averaged over sentences, as in the paper's Table 2.",
             "Train NLL: mean of the last logged training windows. Dev NLL and Dev BLEU (tokenized, greedy unless "
             "train.validate_beam says otherwise): the whole dev set, for the model kept, the validated state with "
             "the best dev BLEU (Selected update)."]
    if any(len(runs) > 1 for runs in groups.values()):
        notes.append("Mean ± sample standard deviation over each model's replicates.")
    return pd.DataFrame(rows), pd.DataFrame(display), notes


MEASURES = {"dropped": "dropped", "attended again": "attended_again", "repetition": "repetition"}


def table_alignment(groups: dict[str, list[dict]],
                    names: dict[str, str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Dropped and attended-again source words and repetition (rnnsearch.evaluation.coverage), in percent, one row
    per model and measure, one column for All and one per source-length bucket: each model's mean (± sd) over
    its replicates. A model without attention has repetition only; score files written before the measures
    existed are left out."""
    rows, display = [], []
    for m, runs in groups.items():
        runs = [r["alignment"] for r in runs if "alignment" in r]
        if not runs:
            continue
        for measure, key in MEASURES.items():
            cells = {"All": [r["all"][key] for r in runs],
                     **{b["bucket"]: [r["by_length"][k][key] for r in runs] for k, b in enumerate(runs[0]["by_length"])}}
            if all(v is None for values in cells.values() for v in values):
                continue
            row, show = {"Model": m, "Measure": measure}, {"Model": (names or {}).get(m, m), "Measure": measure}
            for col, values in cells.items():
                values = [100 * v for v in values if v is not None]
                mean, sd = mean_sd(values) if values else (None, None)
                row[col], row[col + " sd"] = mean, sd
                show[col] = shown(mean, sd, 1) if mean is not None else "–"
            rows.append(row)
            display.append(show)
    definition = next((r["alignment"]["definition"] for runs in groups.values() for r in runs if "alignment" in r), "")
    notes = [f"Percent of source words or output n-grams: {definition}. Columns: source length in words.",
             "A model without attention (RNNencdec) has no alignment to sum: repetition only."]
    return pd.DataFrame(rows), pd.DataFrame(display), notes


def run_tables(scores: list[str], train_stats: list[str], hyps: list[str], ref_tok: str, score: ScoreConfig,
               replicates: int, out_dir: str) -> None:
    """Table 1 (table1.csv, table1.md, table1_replicates.csv) and the alignment table from the score JSONs and
    tokenized translations of every model's replicates (model by model, replicates in order; `{replicate}` in a
    name stands for 1..`replicates`), Table 2 from the train_stats JSONs of every training (an entry that
    `decodes` another model has none of its own)."""
    score_files, stats_files, hyp_files = (each_replicate(x, replicates) for x in (scores, train_stats, hyps))
    samples = score.bootstrap_samples
    if len(score_files) != len(hyp_files) or not stats_files:
        raise InputError(f"tables: {len(score_files)} --scores, {len(hyp_files)} --hyps and {len(stats_files)} "
                         "--train-stats: give a score and translations per model and replicate, in the same order, "
                         "and the statistics of each training")
    out = Path(out_dir)
    scores = [read_json(f) for f in score_files]
    groups = by_model(scores)
    p = {}
    if samples and len(groups) > 1:
        refs = read_lines(ref_tok)
        hyps = {}
        for f, s in zip(hyp_files, scores):
            hyps[id(s)] = read_lines(f)
            check_aligned(f, hyps[id(s)], ref_tok, refs)
        p = replicate_p_values(groups, hyps, refs, samples)
    numbers, display, notes1 = table1(groups, p, samples, paper_names(scores))
    _write(numbers, display, out / "table1", notes1)
    write_json_atomic(out / "metrics.json", headline(numbers))
    with atomic_path(out / "table1_replicates.csv") as tmp:
        table1_replicates(groups, p).to_csv(tmp, index=False)
    stats = [read_json(f) for f in stats_files]
    numbers, display, notes2 = table2(by_model(stats), paper_names(stats))
    _write(numbers, display, out / "table2", notes2)
    numbers, display, notes = table_alignment(groups, paper_names(scores))
    _write(numbers, display, out / "alignment", notes)


def headline(table1_numbers: pd.DataFrame) -> dict:
    """The metrics `dvc exp show` and `dvc metrics diff` show (dvc.yaml declares no other): each model's tokenized
    BLEU, All and No UNK, Table 1's mean over its replicates, to two decimals as Table 1 shows them (none: null)."""
    def two_decimals(value) -> float | None:
        return None if pd.isna(value) else round(float(value), 2)

    return {row["Model"]: {"All": two_decimals(row["All (tokenized BLEU)"]),
                           "No UNK": two_decimals(row["No UNK (tokenized BLEU)"])} for _, row in table1_numbers.iterrows()}
