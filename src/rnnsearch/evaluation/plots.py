"""Stage 8b: Figure 2 (BLEU against sentence length, one curve per model, mean over replicates) and Figure 3
(alignments α_ij of replicate 1)."""

from __future__ import annotations

import random
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from rnnsearch.evaluation.replicates import by_model  # noqa: E402
from rnnsearch.textio import InputError, atomic_path, read_json, read_lines  # noqa: E402

_STYLE = {"rnnsearch": "-", "rnnencdec": "--"}


def _save(fig, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix[1:], dpi=150, bbox_inches="tight")


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
    """One curve per model, the mean over its replicates; RNNsearch solid, RNNencdec dashed (as in the paper);
    shaded: ± 1 sd across replicates (two or more), else the bootstrap 95% interval."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    replicates = int(df.groupby("model")["replicate"].nunique().min())
    for model, g in df.groupby("model", sort=False):
        x, mean, low, high = _curve(g)
        (line,) = ax.plot(x, mean, _STYLE.get(archs.get(model, ""), "-"), marker="o", label=model)
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
        _save(fig, out_stem.with_suffix(suffix))
    plt.close(fig)


def alignment_figure(alpha: np.ndarray, src: list[str], hyp: list[str], title: str, path: Path) -> None:
    """Figure 3 style: source words on x, generated words on y, grayscale with 0 black and 1 white."""
    h, w = alpha.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.32 * w + 1.5), max(3.5, 0.32 * h + 1.5)))
    ax.imshow(alpha, cmap="gray", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(w))
    ax.set_xticklabels(src, rotation=90, fontsize=9)
    ax.xaxis.tick_top()
    ax.set_yticks(range(h))
    ax.set_yticklabels(hyp, fontsize=9)
    ax.set_title(title, fontsize=9, pad=12 + 5.5 * max(len(t) for t in src), loc="left")
    _save(fig, path)
    plt.close(fig)


def pick_alignment_sentences(src_tok: list[str], nounk_ids: list[int], have: set[int], lo: int, hi: int,
                             k: int, seed: int) -> list[int]:
    """Reproducible choice of test sentences of lo..hi source words with no unknown word."""
    pool = [i for i in nounk_ids if i in have and lo <= len(src_tok[i].split()) <= hi]
    if not pool:
        raise InputError(f"no test sentence of {lo}-{hi} words without unknown words has an attention matrix")
    return sorted(random.Random(seed).sample(pool, min(k, len(pool))))


def run_figures(score_files: list[str], attention: str, src_tok_path: str, hyp_tok_path: str,
                nounk_path: str, fig_cfg: dict, seed: int, out_dir: str) -> list[str]:
    out = Path(out_dir)
    scores = [read_json(f) for f in score_files]
    archs = {s["model"]: s["arch"] for s in scores}
    df = bleu_by_length_table(scores)
    with atomic_path(out / "bleu_by_length.csv") as tmp:
        df.to_csv(tmp, index=False)
    figure2(df, archs, out / "bleu_by_length")

    src_tok, hyp_tok = read_lines(src_tok_path), read_lines(hyp_tok_path)
    with np.load(attention) as npz:
        alphas = {int(k): npz[k].astype(np.float32) for k in npz.files if k.isdigit()}
        units = {k: npz[k].tolist() for k in npz.files if not k.isdigit()}  # pieces of a subword vocabulary
    chosen = pick_alignment_sentences(src_tok, read_json(nounk_path)["ids"], set(alphas) - {fig_cfg["alignment_sentence"] - 1},
                                      fig_cfg["alignment_min_len"], fig_cfg["alignment_max_len"],
                                      fig_cfg["alignment_samples"], seed)
    long = pick_alignment_sentences(src_tok, read_json(nounk_path)["ids"], set(alphas), fig_cfg["long_min_len"],
                                    10**6, 1, seed)
    fixed = fig_cfg["alignment_sentence"] - 1
    if fixed not in alphas:
        raise InputError(f"'figures.alignment_sentence': {fixed + 1} is not a line of {src_tok_path} "
                         f"({len(src_tok)} sentences) with an attention matrix in {attention}")
    written = []
    for letter, i in [*zip("abcdefghijklmnopqrstuvwxyz", [fixed, *chosen]), ("long", long[0])]:
        src = units.get(f"src.{i}", src_tok[i].split() + ["</s>"])
        hyp = units.get(f"hyp.{i}", hyp_tok[i].split() + ["</s>"])
        alpha = alphas[i]
        if alpha.shape != (len(hyp), len(src)):
            raise InputError(f"{attention}: matrix {i} has shape {alpha.shape}, expected {(len(hyp), len(src))} "
                             f"from {hyp_tok_path} and {src_tok_path}")
        path = out / f"alignment_{letter}.png"
        title = f"({letter}) test sentence {i + 1}" if letter != "long" else f"a long test sentence ({i + 1})"
        alignment_figure(alpha, src, hyp, title, path)
        written.append(str(path))
    return written
