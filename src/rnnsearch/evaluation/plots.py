"""Stage 8b: Figure 2 (BLEU against sentence length, one curve per model, mean over replicates) and Figure 3
(alignments α_ij of replicate 1)."""

from __future__ import annotations

import importlib.util
import logging
import random
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from rnnsearch.evaluation.heatmap import alignment_figure, save_figure  # noqa: E402
from rnnsearch.evaluation.names import paper_name  # noqa: E402
from rnnsearch.evaluation.replicates import by_model, each_replicate  # noqa: E402
from rnnsearch.textio import InputError, atomic_path, read_json, read_lines  # noqa: E402

log = logging.getLogger("rnnsearch.figures")

_STYLE = {"rnnsearch": "-", "rnnencdec": "--"}

# The page `dvc plots show` fills (.dvc/config's plots.html_template): Vega, Vega-Lite and vega-embed inlined from
# the copies Snakemake ships for its own report, so that DVC's charts draw without the CDN DVC's page loads them from.
VEGA_SCRIPTS = ("vega/vega.js", "vega-lite/vega-lite.js", "vega-embed/vega-embed.js")
DVC_PAGE = """<!DOCTYPE html>
<html>
<head>
<meta charset="utf-8">
<title>rnnsearch: DVC plots</title>
<style>body { font-family: sans-serif; } table { border-spacing: 15px; }</style>
SCRIPTS
</head>
<body>
{plot_divs}
</body>
</html>
"""


def write_dvc_page(path: Path) -> None:
    """DVC's plots page (DVC_PAGE) with Vega inlined, each library's licence beside it."""
    found = importlib.util.find_spec("snakemake")
    assets = Path(next(iter(found.submodule_search_locations))) / "assets" / "data" if found else None
    scripts = []
    for name in VEGA_SCRIPTS:
        js = assets / name if assets else None
        if js is None or not js.is_file():
            raise InputError(f"{js or 'snakemake'}: not found; DVC's plots page inlines the Vega that Snakemake ships "
                             "(reinstall snakemake)")
        licence = (js.parent / "LICENSE").read_text(encoding="utf-8") if (js.parent / "LICENSE").is_file() else ""
        scripts.append(f"<!-- {name}\n{licence.replace('--', '- -')}-->\n<script>\n{js.read_text(encoding='utf-8')}"
                       "\n</script>")
    with atomic_path(path) as tmp:
        tmp.write_text(DVC_PAGE.replace("SCRIPTS", "\n".join(scripts)), encoding="utf-8")


def bleu_by_length_table(scores: list[dict]) -> pd.DataFrame:
    """Every replicate's BLEU per length bucket with its bootstrap 95% interval (the CSV beside Figure 2)."""
    rows = []
    for model, runs in by_model(scores).items():
        for r, s in enumerate(runs):
            for b in s["by_length"]:
                rows.append({"model": model, "replicate": r + 1, "seed": s.get("seed"), "bucket": b["bucket"],
                             "lo": b["lo"], "hi": b["hi"], "sentences": b["sentences"], "bleu": b["bleu"],
                             "ci_low": b["ci_low"], "ci_high": b["ci_high"]})
    return pd.DataFrame(rows)


def _curve(g: pd.DataFrame) -> tuple[list[float], pd.Series, pd.Series | None, pd.Series | None]:
    """One model's curve: bucket centres, the mean BLEU over replicates, and its band: mean ± sd across
    replicates for two or more, else the bootstrap 95% interval (None where there is none)."""
    g = g.dropna(subset=["bleu"])
    per_bucket = g.groupby("lo", sort=True)
    mean = per_bucket["bleu"].mean()
    x = [_center(lo, hi) for lo, hi in per_bucket["hi"].first().items()]
    if g["replicate"].nunique() > 1:
        sd = per_bucket["bleu"].std().fillna(0.0)
        return x, mean, mean - sd, mean + sd
    first = per_bucket.first()
    if first["ci_low"].notna().all():
        return x, mean, first["ci_low"].astype(float), first["ci_high"].astype(float)
    return x, mean, None, None


def _center(lo, hi) -> float:
    """Middle of a length bucket; the open last bucket ("61+") is drawn one bucket width further."""
    return (lo + hi) / 2 if pd.notna(hi) else lo + 4.5


def figure2(df: pd.DataFrame, archs: dict[str, str], out_stem: Path) -> None:
    """One curve per model, the mean over its replicates, labelled with the paper's name; RNNsearch solid,
    RNNencdec dashed (as in the paper); shaded: ± 1 sd across replicates (two or more), else the bootstrap 95%
    interval."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    replicates = int(df.groupby("model")["replicate"].nunique().min())
    for model, g in df.groupby("model", sort=False):
        x, mean, low, high = _curve(g)
        (line,) = ax.plot(x, mean, _STYLE.get(archs.get(model, ""), "-"), marker="o",
                         label=paper_name(model, archs.get(model)))
        if low is not None:
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
    labels = df.drop_duplicates("bucket")
    ax.set_xticks([_center(lo, hi) for lo, hi in zip(labels["lo"], labels["hi"])])
    ax.set_xticklabels(labels["bucket"], rotation=0)
    ax.set_xlabel("Sentence length (source words)")
    ax.set_ylabel("BLEU score (tokenized)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("BLEU on the test set by sentence length (Figure 2)")
    band = (f"mean of {replicates} replicates, shaded: ± 1 sd across them" if replicates > 1
            else "shaded: bootstrap 95% intervals" if df["ci_low"].notna().any() else "")
    if band:
        ax.text(0.99, 0.01, band, transform=ax.transAxes, ha="right", va="bottom", fontsize=7, color="0.4")
    for suffix in (".png", ".pdf"):
        save_figure(fig, out_stem.with_suffix(suffix))
    plt.close(fig)


ALIGNMENT_PANELS = {"dropped": "Dropped source words (%)", "attended_again": "Source words attended again (%)",
                    "repetition": "Repeated output n-grams (%)"}


def alignment_by_length(scores: list[dict], archs: dict[str, str], out_stem: Path) -> None:
    """Beside Figure 2: dropped and attended-again source words and repeated n-grams (the score JSONs'
    `alignment`, rnnsearch.evaluation.coverage) by source-length bucket, a panel each, one curve per model: the
    mean over its replicates, shaded ± 1 sd across two or more. A model without attention has repetition only;
    score files without the measures are left out."""
    fig, axes = plt.subplots(1, 3, figsize=(12.8, 4.0))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    buckets = scores[0]["by_length"]  # Figure 2's, the same for every model
    x = [_center(b["lo"], b["hi"]) for b in buckets]
    for k, (model, runs) in enumerate(by_model(scores).items()):
        runs = [r for r in runs if "alignment" in r]
        if not runs:
            continue
        label, style = paper_name(model, archs.get(model)), _STYLE.get(archs.get(model, ""), "-")
        colour = colours[k % len(colours)]  # a model's colour in every panel (the first two skip RNNencdec)
        for ax, key in zip(axes, ALIGNMENT_PANELS):
            values = np.array([[np.nan if b[key] is None else 100 * b[key] for b in r["alignment"]["by_length"]]
                               for r in runs], dtype=float)
            if np.isnan(values).all():
                continue
            mean = np.nanmean(values, axis=0)
            ax.plot(x, mean, style, marker="o", label=label, color=colour)
            if len(runs) > 1:
                sd = np.nanstd(values, axis=0, ddof=1)
                ax.fill_between(x, mean - sd, mean + sd, color=colour, alpha=0.15, linewidth=0)
    for ax, title in zip(axes, ALIGNMENT_PANELS.values()):
        ax.set_xticks(x)
        ax.set_xticklabels([b["bucket"] for b in buckets], fontsize=7)
        ax.set_xlabel("Sentence length (source words)")
        ax.set_title(title, fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=7)
    fig.suptitle("Dropped, attended-again and repeated words by sentence length (beside Figure 2)", fontsize=11)
    fig.tight_layout()
    for suffix in (".png", ".pdf"):
        save_figure(fig, out_stem.with_suffix(suffix))
    plt.close(fig)


def pick_alignment_sentences(src_tok: list[str], nounk_ids: list[int], have: set[int], lo: int, hi: int,
                             k: int, seed: int) -> tuple[list[int], str]:
    """A reproducible choice of `k` test sentences with an attention matrix (`have`): of lo..hi source words
    with no unknown word, as asked; where there are too few (a small test set), then of lo..hi words with [UNK],
    then the nearest in length. The second value says what was taken instead ("" when nothing)."""
    if not have:
        raise InputError("no test sentence has an attention matrix: the test set is empty")
    rng, nounk = random.Random(seed), set(nounk_ids)
    in_range = [i for i in sorted(have) if lo <= len(src_tok[i].split()) <= hi]
    clean = [i for i in nounk_ids if i in have and lo <= len(src_tok[i].split()) <= hi]  # nounk.json's order
    chosen = rng.sample(clean, min(k, len(clean)))
    with_unk = [i for i in in_range if i not in nounk]
    chosen += rng.sample(with_unk, min(k - len(chosen), len(with_unk)))
    unk = len(chosen) - min(k, len(clean))
    nearest = sorted(set(have) - set(in_range), key=lambda i: (max(lo - len(src_tok[i].split()),
                                                                   len(src_tok[i].split()) - hi), i))
    chosen += nearest[: k - len(chosen)]
    other = k - min(k, len(in_range))
    while len(chosen) < k:  # fewer sentences than figures: show some twice
        chosen.append(chosen[len(chosen) % len(have)])
    said = [f"{unk} with [UNK]" if unk else "", f"{other} of other lengths" if other else ""]
    note = ", ".join(x for x in said if x)
    return sorted(chosen), (f"{note}: the test set has {len(clean)} sentence(s) of {lo}-{hi} words without "
                            f"unknown words" if note else "")


@dataclass(frozen=True)
class AlignmentFiles:
    """Figure 3's inputs: figures.alignment_model's attention.npz, its tokenized translations (`hyp`) and
    nounk.json, and the tokenized test source."""

    attention: str
    src: str
    hyp: str
    nounk: str


def run_figures(scores: list[str], alignment: AlignmentFiles, figures: dict, seed: int, replicates: int,
                out_dir: str) -> list[str]:
    """Figure 2 and the dropped and repeated words beside it from the score JSONs (`{replicate}` in their names:
    1..`replicates`), Figure 3 from `alignment`."""
    out, fig_cfg = Path(out_dir), figures
    attention, src_tok_path, hyp_tok_path = alignment.attention, alignment.src, alignment.hyp
    scores = [read_json(f) for f in each_replicate(scores, replicates)]
    archs = {s["model"]: s["arch"] for s in scores}
    df = bleu_by_length_table(scores)
    with atomic_path(out / "bleu_by_length.csv") as tmp:
        df.to_csv(tmp, index=False)
    with atomic_path(out / "bleu_by_length_models.csv") as tmp:  # `dvc plots show`: one column per model
        df.pivot_table(index="bucket", columns="model", values="bleu", sort=False)[list(archs)].reset_index().to_csv(
            tmp, index=False)
    figure2(df, archs, out / "bleu_by_length")
    alignment_by_length(scores, archs, out / "alignment_by_length")
    write_dvc_page(out / "dvc_page.html")

    src_tok, hyp_tok = read_lines(src_tok_path), read_lines(hyp_tok_path)
    with np.load(attention) as npz:
        alphas = {int(k): npz[k].astype(np.float32) for k in npz.files if k.isdigit()}
        units = {k: npz[k].tolist() for k in npz.files if not k.isdigit()}  # pieces of a subword vocabulary
    nounk, fixed = read_json(alignment.nounk)["ids"], fig_cfg["alignment_sentence"] - 1
    if fixed not in alphas:
        log.warning("figures: 'figures.alignment_sentence' %d is not a line of %s (%d sentences) with an attention "
                    "matrix; Figure 3 (a) shows sentence %d instead", fixed + 1, src_tok_path, len(src_tok),
                    min(alphas) + 1)
        fixed = min(alphas)
    chosen, note = pick_alignment_sentences(src_tok, nounk, set(alphas) - {fixed}, fig_cfg["alignment_min_len"],
                                            fig_cfg["alignment_max_len"], fig_cfg["alignment_samples"], seed)
    if note:
        log.warning("figures: Figure 3 (b…) shows %s ('figures.alignment_min_len', 'alignment_max_len')", note)
    long, long_note = pick_alignment_sentences(src_tok, nounk, set(alphas), fig_cfg["long_min_len"], 10**6, 1, seed)
    if long_note:
        log.warning("figures: alignment_long.png shows %s ('figures.long_min_len')", long_note)
    model = paper_name(fig_cfg["alignment_model"], archs.get(fig_cfg["alignment_model"]))
    letters = "abcdefghijklmnopqrstuvwxyz"[: len(chosen) + 2]
    written = []
    for letter, i in zip(letters, [fixed, *chosen, long[0]]):
        src = units.get(f"src.{i}", src_tok[i].split() + ["</s>"])
        hyp = units.get(f"hyp.{i}", hyp_tok[i].split() + ["</s>"])
        alpha = alphas[i]
        if alpha.shape != (len(hyp), len(src)):
            raise InputError(f"{attention}: matrix {i} has shape {alpha.shape}, expected {(len(hyp), len(src))} "
                             f"from {hyp_tok_path} and {src_tok_path}")
        path = out / f"alignment_{'long' if letter == letters[-1] else letter}.png"
        title = f"({letter}) {model}: test sentence {i + 1}, {len(src_tok[i].split())} words"
        if "[UNK]" in " ".join(hyp) or (i not in nounk and letter != "a"):
            title += ", with [UNK]"
        alignment_figure(alpha, src, hyp, title, path)
        written.append(str(path))
    return written
