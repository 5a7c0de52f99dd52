"""Stage 8a: the paper's Table 1 (BLEU, All and No UNK) and Table 2 (learning statistics) as CSV and Markdown."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rnnsearch.evaluation.score import check_aligned
from rnnsearch.textio import atomic_path, read_json, read_lines


def _write(df: pd.DataFrame, stem: Path, notes: list[str]) -> None:
    with atomic_path(stem.with_suffix(".csv")) as tmp:
        df.to_csv(tmp, index=False)
    shown = df.copy()
    for col in [c for c in df.columns if c.startswith("p vs")]:  # p-values need more digits than BLEU
        shown[col] = [f"{v:.4f}" if pd.notna(v) else "–" for v in df[col]]
    with atomic_path(stem.with_suffix(".md")) as tmp:
        tmp.write_text(shown.to_markdown(index=False, floatfmt=".2f") + "\n\n" + "\n".join(notes) + "\n",
                       encoding="utf-8")


def paired_bootstrap(names: list[str], hyps: list[list[str]], refs: list[str], samples: int) -> dict[str, float]:
    """p-values of sacreBLEU's paired bootstrap resampling (Koehn 2004) of each system against the first,
    on tokenized BLEU."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    test = PairedTest(list(zip(names, hyps)), {"BLEU": BLEU(tokenize="none", force=True)}, references=[refs],
                      test_type="bs", n_samples=samples)
    _, results = test()
    return {name: r.p_value for name, r in zip(names[1:], results["BLEU"][1:])}


def table1(scores: list[dict], p_values: dict[str, float] | None = None,
           samples: int = 0) -> tuple[pd.DataFrame, list[str]]:
    baseline = scores[0]["model"]
    rows = [{"Model": s["model"],
             "All (tokenized BLEU)": s["bleu_tok_all"], "No UNK (tokenized BLEU)": s["bleu_tok_nounk"],
             "All (sacreBLEU)": s["sacrebleu_all"], "No UNK (sacreBLEU)": s["sacrebleu_nounk"],
             "No-UNK sentences": s["nounk_sentences"], "Test sentences": s["sentences"]} for s in scores]
    if p_values:
        for row in rows:
            row[f"p vs {baseline}"] = p_values.get(row["Model"])
    signatures = sorted({s["sacrebleu_signature"] for s in scores})
    notes = ["Tokenized BLEU: " + scores[0]["tokenized_bleu_definition"] + ".",
             "sacreBLEU: detokenized output against the raw references; signature: " + "; ".join(signatures) + ".",
             "No UNK: sentences without out-of-shortlist words in source and reference, decoded with [UNK] forbidden."]
    if p_values:
        notes.append(f"p vs {baseline}: sacreBLEU's paired bootstrap resampling ({samples} samples) of tokenized BLEU "
                     f"on All sentences against {baseline}, the first model of params.yaml's `models`.")
    return pd.DataFrame(rows), notes


def table2(stats: list[dict]) -> tuple[pd.DataFrame, list[str]]:
    rows = [{"Model": s["model"], "Updates": s["updates"], "Epochs": s["epochs"], "Hours": s["hours"],
             "Device": s["device"], "Train NLL": s["train_nll"], "Dev NLL": s["dev_nll"],
             "Dev BLEU": s["dev_bleu"], "Selected update": s["selected_update"],
             "Early stop": "yes" if s["early_stopped"] else "no", "Parameters": s["parameters"]} for s in stats]
    notes = ["NLL per sentence (summed over words, </s> included), averaged over sentences, as in the paper's Table 2.",
             "Train NLL: mean of the last logged training windows. Dev NLL and Dev BLEU (tokenized, greedy unless "
             "train.validate_beam says otherwise): the whole dev set, for the model kept, the validated state with "
             "the best dev BLEU (Selected update)."]
    return pd.DataFrame(rows), notes


def run_tables(score_files: list[str], stats_files: list[str], hyp_files: list[str], ref_tok: str, samples: int,
               out_dir: str) -> None:
    out = Path(out_dir)
    scores = [read_json(f) for f in score_files]
    p_values = None
    if samples and len(scores) > 1:
        refs = read_lines(ref_tok)
        hyps = [read_lines(f) for f in hyp_files]
        for f, h in zip(hyp_files, hyps):
            check_aligned(f, h, ref_tok, refs)
        p_values = paired_bootstrap([s["model"] for s in scores], hyps, refs, samples)
    df1, notes1 = table1(scores, p_values, samples)
    _write(df1, out / "table1", notes1)
    df2, notes2 = table2([read_json(f) for f in stats_files])
    _write(df2, out / "table2", notes2)
