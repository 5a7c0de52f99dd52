"""Stage 9: one Markdown page with the tables, the figures, sample translations, long-sentence translations (the
paper's Table 3) and the parameters of the run, linking the files under `results/`."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import yaml

from rnnsearch.evaluation.names import paper_names
from rnnsearch.evaluation.replicates import by_model, each_replicate, mean_sd, shown
from rnnsearch.textio import atomic_path, read_json, read_lines


def _rel(path: str, start: Path) -> str:
    return os.path.relpath(path, start)


def _bleu_cell(runs: list[dict], j: int) -> str:
    """Bucket j of a model: BLEU [bootstrap 95% interval] for one replicate, mean ± sd for several."""
    values = [s["by_length"][j]["bleu"] for s in runs if s["by_length"][j]["bleu"] is not None]
    if not values:
        return "–"
    if len(runs) > 1:
        return shown(*mean_sd(values))
    bucket = runs[0]["by_length"][j]
    if bucket.get("ci_low") is None:
        return f"{bucket['bleu']:.2f}"
    return f"{bucket['bleu']:.2f} [{bucket['ci_low']:.1f}, {bucket['ci_high']:.1f}]"


def long_sentence_examples(src: list[str], min_len: int, k: int) -> list[int]:
    """The first k test sentences with at least min_len source words (deterministic, like Table 3)."""
    return [i for i, s in enumerate(src) if len(s.split()) >= min_len][:k]


def table3(src: list[str], ref: list[str], hyps: dict[str, list[str]], min_len: int, k: int = 3) -> list[str]:
    """The paper's Table 3: the first k test sentences of at least `min_len` source words (figures.long_min_len)
    with each model's translation; where there are none, the k longest, saying so."""
    lines = ["## Table 3: translations of long test sentences", ""]
    chosen = long_sentence_examples(src, min_len, k)
    if chosen:
        lines += [f"The first {len(chosen)} test sentences of {min_len} or more source words, in the order of the "
                  "test file (`figures.long_min_len`; no choice by score), with each model's output as scored.", ""]
    else:
        chosen = sorted(sorted(range(len(src)), key=lambda i: -len(src[i].split()))[:k])
        lines += [f"No test sentence has {min_len} or more source words (`figures.long_min_len`); the "
                  f"{len(chosen)} longest instead, with each model's output as scored.", ""]
    for i in chosen:
        lines += [f"**Sentence {i + 1}** ({len(src[i].split())} words)", "", f"- Source: {src[i]}",
                  f"- Reference: {ref[i]}", *(f"- {m}: {h[i]}" for m, h in hyps.items()), ""]
    return lines


def figure3_caption(fig: dict, model: str, several: bool) -> list[str]:
    """Figure 3's heading and caption: which sentences its panels show and how to read them."""
    k = fig["alignment_samples"]
    drawn, long = "abcdefghijklmnopqrstuvwxyz"[1: k + 1], "abcdefghijklmnopqrstuvwxyz"[k + 1]
    panels = f"({drawn[0]}–{drawn[-1]})" if k > 1 else f"({drawn})"
    return [f"## Figure 3: alignments of {model}" + (" (replicate 1)" if several else ""), "",
            f"The weights α_ij of {model}'s attention as it translated: (a) test sentence "
            f"{fig['alignment_sentence']} (`figures.alignment_sentence`); {panels} "
            f"{'sentences' if k > 1 else 'a sentence'} of {fig['alignment_min_len']}–{fig['alignment_max_len']} "
            f"source words without unknown words, and ({long}) one of {fig['long_min_len']} or more "
            "(`figures.long_min_len`), drawn from the seed. Source words (and </s>) across, generated words down; "
            "black is 0, white is 1. Each title gives the sentence's line in the test file and its length.", ""]


def sample_sentences(n: int, seed: int, k: int) -> list[int]:
    """k test sentence indices drawn reproducibly from the seed, in file order."""
    return sorted(random.Random(seed).sample(range(n), min(k, n)))


@dataclass(frozen=True)
class ReportInputs:
    """What the results page shows: Tables 1 and 2 (Markdown), Figures 2 and 3, the AER's JSON and the explorer
    (when there are)."""

    table1: str
    table2: str
    figure2: str
    alignments: list[str]
    aer: str | None = None
    explorer: str | None = None
    alignment_table: str | None = None  # tables/alignment.md: dropped, attended-again, repeated words by length
    alignment_figure: str | None = None  # figures/alignment_by_length.png: the same by length, drawn


def _figure2_table(groups: dict[str, list[dict]], names: dict[str, str], several: bool) -> list[str]:
    """Figure 2's numbers: tokenized BLEU per source-length bucket, a column per model."""
    lines = ["Tokenized BLEU per source-length bucket " + ("(mean ± sd over replicates; one replicate: "
             "[bootstrap 95% interval])." if several else "[bootstrap 95% interval]."), ""]
    header = "| bucket | " + " | ".join(names[m] for m in groups) + " |"
    lines += [header, "|" + "---|" * (len(groups) + 1)]
    for j, b in enumerate(next(iter(groups.values()))[0]["by_length"]):
        cells = [_bleu_cell(runs, j) for runs in groups.values()]
        lines.append(f"| {b['bucket']} ({b['sentences']} sent.) | " + " | ".join(cells) + " |")
    return lines


def _aer_section(aer: dict) -> list[str]:
    """The aer stage's JSON as a section: the argmax links, and with a threshold those above it too."""
    lines = ["", f"## Alignment error rate of {aer['model']}", "",
             f"Attention against the gold links of {aer['sentences']} test sentences ({aer['gold']}), the "
             "reference forced; links: the argmax of α for each reference word"
             + (f", or every α ≥ {aer['threshold']}" if aer["threshold"] else "") + ".", "",
             "| links | AER | precision | recall | hard links | sure gold links |", "|---|---|---|---|---|---|"]
    for name, key in (("argmax", "argmax"), (f"argmax + α ≥ {aer['threshold']}", "with_threshold")):
        if key in aer:
            r = aer[key]
            lines.append(f"| {name} | {r['aer']:.3f} | {r['precision']:.3f} | {r['recall']:.3f} | {r['links']} | "
                         f"{r['sure']} |")
    return lines


def run_report(config: dict, inputs: ReportInputs, scores: list[str], src: str, ref: str,
               hyps: list[tuple[str, str]] | dict[str, str], out: str) -> None:
    """results/report.md: the tables, figures, AER, sample translations and the params (`config`) of this run;
    `scores` (`{replicate}` in their names: 1..replicates), `src`, `ref`: the raw test set, `hyps`: model → its
    raw translations."""
    params, out_path = config, Path(out)
    base = out_path.parent
    table1_md, table2_md, figure2, alignments = inputs.table1, inputs.table2, inputs.figure2, inputs.alignments
    aer_file, explorer, src_raw, ref_raw, hyp_files = inputs.aer, inputs.explorer, src, ref, dict(hyps)
    scores = [read_json(f) for f in each_replicate(scores, config["replicates"])]
    groups, names = by_model(scores), paper_names(scores)
    src, ref = read_lines(src_raw), read_lines(ref_raw)
    hyps = {names.get(m, m): read_lines(p) for m, p in hyp_files.items()}
    lines = ["# rnnsearch: results of this run", "",
             "Reproduction of Bahdanau, Cho & Bengio (2015), *Neural Machine Translation by Jointly Learning to "
             "Align and Translate*, on the corpus configured in `params.yaml` "
             f"(`data.source: {params['data']['source']}`).", "",
             *([f"Every test sentence with each model's translation, its scores and its alignments: "
                f"[the explorer]({_rel(explorer, base)}) (a page of its own; it opens from the file system).", ""]
               if explorer else []),
             "## Table 1: BLEU on the test set", "", Path(table1_md).read_text(encoding="utf-8"),
             "## Table 2: learning statistics", "", Path(table2_md).read_text(encoding="utf-8"),
             "## Figure 2: BLEU by sentence length", "", f"![Figure 2]({_rel(figure2, base)})", ""]
    several = any(len(runs) > 1 for runs in groups.values())
    lines += _figure2_table(groups, names, several)
    if inputs.alignment_table:
        lines += ["", "## Dropped and repeated words by sentence length", "",
                  Path(inputs.alignment_table).read_text(encoding="utf-8")]
    if inputs.alignment_figure:
        lines += ["", f"![Dropped and repeated words by sentence length]({_rel(inputs.alignment_figure, base)})", ""]
    lines += ["", *figure3_caption(params["figures"], names.get(params["figures"]["alignment_model"],
                                                               params["figures"]["alignment_model"]), several)]
    lines += [f"![{Path(a).stem}]({_rel(a, base)})" for a in alignments]
    if aer_file:
        lines += _aer_section(read_json(aer_file))
    lines += ["", "## Sample translations", "",
              f"Five test sentences drawn with `seed` {params['seed']}, each model's output as scored (detokenized"
              + (", replicate 1)." if several else ")."), ""]
    for i in sample_sentences(len(src), params["seed"], 5):
        lines += [f"**Sentence {i + 1}**", "", f"- Source: {src[i]}", f"- Reference: {ref[i]}"]
        lines += [f"- {m}: {h[i]}" for m, h in hyps.items()]
        lines.append("")
    lines += table3(src, ref, hyps, params["figures"]["long_min_len"])
    lines += ["## Parameters", "", "```yaml", yaml.safe_dump(params, sort_keys=False).rstrip(), "```", ""]
    with atomic_path(out_path) as tmp:
        tmp.write_text("\n".join(lines), encoding="utf-8")
