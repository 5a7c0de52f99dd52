"""An alignment α_ij drawn as a heatmap (Figure 3's style), for the figures stage and for `rnnsearch translate
--heatmap-dir`, and the atomic save of a matplotlib figure."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from rnnsearch.textio import atomic_path  # noqa: E402


def save_figure(fig, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix[1:], dpi=150, bbox_inches="tight")


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
    save_figure(fig, path)
    plt.close(fig)
