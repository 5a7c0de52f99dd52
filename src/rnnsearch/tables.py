"""Stage 8a: the paper's Table 1 (BLEU, All and No UNK) and Table 2 (learning statistics) as CSV and Markdown."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .textio import atomic_path, read_json


def _write(df: pd.DataFrame, stem: Path, notes: list[str]) -> None:
    with atomic_path(stem.with_suffix(".csv")) as tmp:
        df.to_csv(tmp, index=False)
    with atomic_path(stem.with_suffix(".md")) as tmp:
        tmp.write_text(df.to_markdown(index=False, floatfmt=".2f") + "\n\n" + "\n".join(notes) + "\n", encoding="utf-8")


def table1(scores: list[dict]) -> tuple[pd.DataFrame, list[str]]:
    rows = [{"Model": s["model"],
             "All (tokenized BLEU)": s["bleu_tok_all"], "No UNK (tokenized BLEU)": s["bleu_tok_nounk"],
             "All (sacreBLEU)": s["sacrebleu_all"], "No UNK (sacreBLEU)": s["sacrebleu_nounk"],
             "No-UNK sentences": s["nounk_sentences"], "Test sentences": s["sentences"]} for s in scores]
    signatures = sorted({s["sacrebleu_signature"] for s in scores})
    notes = ["Tokenized BLEU: " + scores[0]["tokenized_bleu_definition"] + ".",
             "sacreBLEU: detokenized output against the raw references; signature: " + "; ".join(signatures) + ".",
             "No UNK: sentences without out-of-shortlist words in source and reference, decoded with [UNK] forbidden."]
    return pd.DataFrame(rows), notes


def table2(stats: list[dict]) -> tuple[pd.DataFrame, list[str]]:
    rows = [{"Model": s["model"], "Updates": s["updates"], "Epochs": s["epochs"], "Hours": s["hours"],
             "Device": s["device"], "Train NLL": s["train_nll"], "Dev NLL": s["dev_nll"],
             "Parameters": s["parameters"]} for s in stats]
    notes = ["NLL per sentence (summed over words, </s> included), averaged over sentences, as in the paper's Table 2.",
             "Train NLL: mean of the last logged training windows; Dev NLL: the whole dev set after training."]
    return pd.DataFrame(rows), notes


def run_tables(score_files: list[str], stats_files: list[str], out_dir: str) -> None:
    out = Path(out_dir)
    df1, notes1 = table1([read_json(f) for f in score_files])
    _write(df1, out / "table1", notes1)
    df2, notes2 = table2([read_json(f) for f in stats_files])
    _write(df2, out / "table2", notes2)
