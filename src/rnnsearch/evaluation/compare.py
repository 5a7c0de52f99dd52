"""Two models of one run compared over their replicates (`rnnsearch compare`): the precision study's report
(docs/precision.md), or any ablation trained with `replicates` ≥ 2.

For each test metric (tokenized BLEU All and No UNK, sacreBLEU All, tokenized BLEU per source-length bucket) and
each dev figure of the training (best and last dev NLL per word), the mean ± sample standard deviation of each
model over its replicates, the difference B − A, and Welch's t test (unequal variances):

    t = (x̄_B − x̄_A) / sqrt(s_A²/n_A + s_B²/n_B)
    ν = (s_A²/n_A + s_B²/n_B)² / ((s_A²/n_A)²/(n_A − 1) + (s_B²/n_B)²/(n_B − 1))      (Welch–Satterthwaite)
    p = P(|T_ν| ≥ |t|)                                                                  (two-sided)

(rnnsearch.evaluation.replicates, as Table 1's p-values). The figure overlays both models' dev-NLL curves, every
replicate and their mean.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from rnnsearch.evaluation.replicates import mean_sd, shown, welch
from rnnsearch.textio import InputError, atomic_path, read_json, write_json_atomic


def arms_row(name: str, a: list[float], b: list[float]) -> dict:
    """One compared figure: each model's mean ± sd over its replicates, B − A and Welch's test."""
    (mean_a, sd_a), (mean_b, sd_b) = mean_sd(a), mean_sd(b)
    return {"metric": name, "n_a": len(a), "mean_a": mean_a, "sd_a": sd_a, "n_b": len(b), "mean_b": mean_b,
            "sd_b": sd_b, "diff": mean_b - mean_a, **welch(a, b), "a": a, "b": b}


def _tsv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f, delimiter="\t")]


def load_arm(results: Path, model: str, replicates: int) -> list[dict]:
    """Replicates 1..`replicates` of `model` in `results`: their scores, training statistics and validations."""
    if replicates < 2:
        raise InputError(f"replicates: {replicates}; a comparison needs at least 2 trainings per model "
                         f"(params.yaml: replicates)")
    arm = []
    for r in range(1, replicates + 1):
        score, folder = results / "scores" / model / f"replicate{r}.json", results / "models" / model / f"replicate{r}"
        for path in (score, folder / "train_stats.json", folder / "validation.tsv"):
            if not path.is_file():
                raise InputError(f"{path}: missing; replicate {r} of {model} must be trained and scored first")
        arm.append({"replicate": r, "score": read_json(score), "stats": read_json(folder / "train_stats.json"),
                    "validations": _tsv(folder / "validation.tsv")})
    return arm


def metrics(rep: dict) -> dict[str, float | None]:
    """One replicate's compared figures, by name."""
    s, st, v = rep["score"], rep["stats"], rep["validations"]
    out = {"BLEU All (tokenized)": s["bleu_tok_all"], "sacreBLEU All": s["sacrebleu_all"],
           "BLEU No UNK (tokenized)": s["bleu_tok_nounk"]}
    out |= {f"BLEU, source {b['bucket']} words ({b['sentences']} sentences)": b["bleu"] for b in s["by_length"]}
    out |= {"best dev NLL per word": min(r["dev_nll_per_word"] for r in v),
            "last dev NLL per word": v[-1]["dev_nll_per_word"],
            "training seconds per update": st["seconds"] / st["updates"]}
    return out


def compare(arm_a: list[dict], arm_b: list[dict]) -> list[dict]:
    """One row per figure that every replicate of both arms has."""
    ma, mb = [metrics(r) for r in arm_a], [metrics(r) for r in arm_b]
    rows = []
    for name in ma[0]:
        a, b = [m.get(name) for m in ma], [m.get(name) for m in mb]
        if None not in a and None not in b:
            rows.append(arms_row(name, a, b))
    return rows


def markdown(rows: list[dict], a: str, b: str, arms: tuple[list[dict], list[dict]]) -> str:
    """The comparison as a Markdown table, the replicates' seeds, devices and commits below it."""
    lines = [f"| figure | {a} | {b} | {b} − {a} | Welch t | df | p |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        digits = 4 if "per update" in r["metric"] else 3 if "NLL" in r["metric"] else 2
        df = "–" if r["df"] is None else f"{r['df']:.1f}"
        lines.append(f"| {r['metric']} | {shown(r['mean_a'], r['sd_a'], digits)} (n={r['n_a']}) | "
                     f"{shown(r['mean_b'], r['sd_b'], digits)} (n={r['n_b']}) | {r['diff']:+.{digits}f} | "
                     f"{r['t']:.2f} | {df} | {r['p']:.3f} |")
    lines.append("")
    for name, arm in zip((a, b), arms):
        st = arm[0]["stats"]
        lines.append(f"{name}: replicates {', '.join(str(r['replicate']) for r in arm)}, seeds "
                     f"{', '.join(str(r['stats']['seed']) for r in arm)}, {st['updates']} updates, device "
                     f"{st['device']}, {st['threads']} thread(s), git {str(st['git'])[:10]}")
    return "\n".join(lines) + "\n"


def plot_curves(arms: dict[str, list[dict]], path: Path) -> None:
    """Dev NLL per word against updates: every replicate thin, the mean of the replicates thick, one colour
    per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for (name, arm), colour in zip(arms.items(), ("tab:blue", "tab:orange")):
        curves = [[(v["update"], v["dev_nll_per_word"]) for v in r["validations"]] for r in arm]
        for curve in curves:
            ax.plot(*zip(*curve), color=colour, alpha=0.35, linewidth=0.9)
        common = sorted(set.intersection(*(set(u for u, _ in c) for c in curves)))
        by = [dict(c) for c in curves]
        ax.plot(common, [statistics.fmean(d[u] for d in by) for u in common], color=colour, linewidth=2.2,
                label=f"{name} (mean of {len(arm)}; thin: each replicate)")
    ax.set_xlabel("update")
    ax.set_ylabel("dev NLL per word")
    ax.grid(alpha=0.3)
    ax.legend()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=150, bbox_inches="tight")
    plt.close(fig)


def run_compare(a: str, b: str, replicates: int, out_dir: str, results: str = "results") -> dict:
    """Compare models `a` and `b` of the run in `results` over replicates 1..`replicates`; writes
    comparison.json, comparison.md and dev_nll.png into `out_dir`."""
    results_dir, out = Path(results), Path(out_dir)
    arm_a, arm_b = load_arm(results_dir, a, replicates), load_arm(results_dir, b, replicates)
    rows = compare(arm_a, arm_b)
    out.mkdir(parents=True, exist_ok=True)
    result = {"a": a, "b": b, "results": str(results_dir), "test": "Welch's two-sided t test",
              "rows": rows, "signature": arm_a[0]["score"]["sacrebleu_signature"],
              "curves": {name: {r["replicate"]: r["validations"] for r in arm}
                         for name, arm in ((a, arm_a), (b, arm_b))}}
    write_json_atomic(out / "comparison.json", result)
    with atomic_path(out / "comparison.md") as tmp:
        tmp.write_text(markdown(rows, a, b, (arm_a, arm_b)), encoding="utf-8")
    plot_curves({a: arm_a, b: arm_b}, out / "dev_nll.png")
    return result
