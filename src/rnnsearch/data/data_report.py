"""The data report: what each preparation step kept, how long the sentences are, how much the shortlists cover.

* sentence pairs and words after each step, in all and per corpus (WMT'14 has five or six): the corpus stage,
  tokenization and cleaning (with what each rule dropped), and the ≤N training sets. The per-corpus figures come
  from one streaming pass over the tokenized shards, which keep the corpus order, with the cleaning rule of the
  clean stage (`prepare.clean_reason`) and the length limits of the ≤N sets;
* length histograms of the tokenized training, dev and test text (results/figures/lengths.png);
* shortlist coverage and [UNK] rate (share of running words outside the shortlist) on train, dev and test;
* the lines whose punctuation the tokenize stage normalised, per text (read from the `<tokenized file>.json`
  it writes beside each tokenized file: the training shards, dev and test).

Every count is read from the stage statistics or streamed from the files, so the report scales with the corpus.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rnnsearch.data.corpus.local import iter_pairs
from rnnsearch.data.prepare import clean_reason
from rnnsearch.data.vocab import Vocab
from rnnsearch.textio import InputError, atomic_path, read_json, write_json_atomic


def per_corpus(corpus: dict, tok_src: list[str], tok_tgt: list[str], max_len: int, max_ratio: float,
               limits: list[int]) -> dict:
    """{corpus: {step: {pairs, src_words, tgt_words}}} for the steps raw (the corpus stage's counts), tokenized,
    cleaned and ≤N, streamed over the tokenized shards (in order, aligned line by line with the raw training text)."""
    raw = corpus["train"].get("corpora", {"train": corpus["train"]})
    bounds = [(name, c["pairs"]) for name, c in raw.items()]
    steps = ["tokenized", "cleaned"] + [f"≤{n}" for n in sorted(limits)]
    out = {name: {"raw": {k: raw[name][k] for k in ("pairs", "src_words", "tgt_words")},
                  **{s: {"pairs": 0, "src_words": 0, "tgt_words": 0} for s in steps}} for name, _ in bounds}
    k, left = 0, bounds[0][1]

    def add(step, na, nb):
        row = out[bounds[k][0]][step]
        row["pairs"] += 1
        row["src_words"] += na
        row["tgt_words"] += nb

    for fs, ft in zip(tok_src, tok_tgt):
        for _, x, y in iter_pairs(fs, ft):
            while left == 0:
                k += 1
                if k == len(bounds):
                    raise InputError(f"{fs}: more tokenized lines than the corpus stage's {sum(n for _, n in bounds)} pairs")
                left = bounds[k][1]
            left -= 1
            na, nb = len(x.decode("utf-8").split()), len(y.decode("utf-8").split())
            add("tokenized", na, nb)
            if clean_reason(na, nb, max_len, max_ratio) is None:
                add("cleaned", na, nb)
                for n in limits:
                    if clean_reason(na, nb, n, 0) is None:  # the filter stage's rule (prepare.run_filter)
                        add(f"≤{n}", na, nb)
    return out


def _stream_counts(path: str, vocab: Vocab) -> tuple[Counter, int, int]:
    """Histogram of sentence lengths, running words and running words outside the shortlist of one file."""
    lengths, words, unk = Counter(), 0, 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            toks = line.split()
            lengths[len(toks)] += 1
            words += len(toks)
            unk += sum(1 for t in toks if t not in vocab)  # subwords: a word with an unknown piece
    return lengths, words, unk


def _steps(corpus: dict, clean: list[dict], filters: dict[int, dict]) -> list[dict]:
    rows = []
    t = corpus["train"]
    why = {"dropped_empty": "empty side", "dropped_invalid_utf8": "invalid UTF-8"}
    rows.append({"step": "corpus (raw training text)", "pairs": t["pairs"], "src_words": t["src_words"],
                 "tgt_words": t["tgt_words"], "dropped": t.get("lines", t["pairs"]) - t["pairs"],
                 "detail": ", ".join(f"{why.get(k, k.removeprefix('dropped_').replace('_', ' '))} {n:,}"
                                     for k, n in t.items() if k.startswith("dropped_") and n)})
    total = {k: sum(s[k] for s in clean) for k in ("pairs_in", "pairs", "dropped_empty", "dropped_long",
                                                    "dropped_ratio", "src_words", "tgt_words")}
    rows.append({"step": f"tokenized and cleaned ({len(clean)} shards)", "pairs": total["pairs"],
                 "src_words": total["src_words"], "tgt_words": total["tgt_words"],
                 "dropped": total["pairs_in"] - total["pairs"],
                 "detail": f"empty {total['dropped_empty']}, too long {total['dropped_long']}, "
                           f"length ratio {total['dropped_ratio']}"})
    for n, f in sorted(filters.items()):
        rows.append({"step": f"≤{n} words (RNN*-{n} training set)", "pairs": f["pairs_kept"],
                     "src_words": f["src_words"], "tgt_words": f["tgt_words"], "dropped": f["pairs_in"] - f["pairs_kept"]})
    return rows


@dataclass(frozen=True)
class DataReportInputs:
    """What the data report reads: the corpus stage's JSON, the tokenized text (whole and in training shards),
    the clean and filter stages' counts, the shortlists and the binarize stage's headers."""

    corpus: str
    tok_dir: str
    tok_shards_src: list[str]
    tok_shards_tgt: list[str]
    clean_stats: list[str]
    filter_stats: list[str]
    vocab_dir: str
    binarized: list[str] = ()


def run_data_report(inputs: DataReportInputs, src: str, tgt: str, max_len: int, max_ratio: float, out_md: str,
                    out_json: str, out_png: str) -> dict:
    """Stage 9's data report: pairs and words after each step, per corpus, length histograms, coverage."""
    tok_dir, vocab_dir = Path(inputs.tok_dir), Path(inputs.vocab_dir)
    tok_shards = (inputs.tok_shards_src, inputs.tok_shards_tgt)
    corpus = read_json(inputs.corpus)
    filters = {}
    for path in inputs.filter_stats:
        f = read_json(path)
        filters[f["max_len"]] = f
    steps = _steps(corpus, [read_json(p) for p in inputs.clean_stats], filters)
    corpora = per_corpus(corpus, *tok_shards, max_len, max_ratio, sorted(filters))
    gathered = {k: sum(c["cleaned"][k] for c in corpora.values()) for k in ("pairs", "src_words", "tgt_words")}
    if gathered != {k: steps[-1 - len(filters)][k] for k in gathered}:
        raise InputError(f"the tokenized shards re-cleaned give {gathered}, the clean stage counted "
                         f"{ {k: steps[-1 - len(filters)][k] for k in gathered} }: stale shards?")
    vocabs = {side: Vocab.load(vocab_dir / f"vocab.{lang}.tsv") for side, lang in (("src", src), ("tgt", tgt))}
    coverage, histograms = {}, {}
    for split in ("train", "dev", "test"):
        for side, lang in (("src", src), ("tgt", tgt)):
            lengths, words, unk = _stream_counts(str(tok_dir / f"{split}.{lang}"), vocabs[side])
            histograms[f"{split}.{lang}"] = dict(sorted(lengths.items()))
            coverage[f"{split}.{lang}"] = {"words": words, "unk": unk, "unk_rate": round(unk / words, 5) if words else 0.0,
                                           "coverage": round(1 - unk / words, 5) if words else 1.0,
                                           "sentences": sum(lengths.values())}
    report = {"steps": steps, "corpora": corpora, "coverage": coverage, "histograms": histograms,
              "shortlist": {side: len(v) - 3 for side, v in vocabs.items()}}
    if "selection" in corpus:
        report["corpus"] = {k: v for k, v in corpus.items() if k in ("selection", "lium_devtest")}
    normalised = {split: corpus[split]["unicode_normalised"] for split in ("train", "dev", "test")
                  if "unicode_normalised" in corpus.get(split, {})}
    if normalised:  # lines (either side) that data.unicode changed; the embedded corpus is written in NFC
        report["unicode_normalised"] = normalised
    report["punctuation"] = _punctuation(tok_dir, tok_shards, src, tgt)
    report["binarized"] = {Path(p).name.removesuffix(".json"): _binarized(read_json(p)) for p in inputs.binarized}
    write_json_atomic(out_json, report)
    _plot(histograms, src, tgt, out_png)
    with atomic_path(out_md) as tmp:
        tmp.write_text(_markdown(report, src, tgt, Path(out_png), Path(out_md)), encoding="utf-8")
    return report


def _punctuation(tok_dir: Path, tok_shards: tuple[list, list], src: str, tgt: str) -> dict:
    """{text: lines whose punctuation was normalised} from the tokenize stage's statistics, and whether it ran."""
    texts = {f"train.{lang}": [f"{p}.json" for p in shards] for lang, shards in zip((src, tgt), tok_shards)}
    texts |= {f"{split}.{lang}": [tok_dir / f"{split}.{lang}.json"] for split in ("dev", "test") for lang in (src, tgt)}
    stats = {text: [read_json(p) for p in paths] for text, paths in texts.items()}
    return {"normalize_punctuation": all(s["normalize_punctuation"] for ss in stats.values() for s in ss),
            "lines_changed": {text: sum(s["punctuation_normalised"] for s in ss) for text, ss in stats.items()}}


def _binarized(header: dict) -> dict:
    """The binarize stage's sizes and time, from its header."""
    return {"pairs": header["pairs"], "dtype": header["dtype"], "seconds": header["seconds"],
            **{f"{side}_tokens": header[side]["tokens"] for side in ("src", "tgt")},
            "bytes": header["src"]["bin_bytes"] + header["tgt"]["bin_bytes"] + header["idx_bytes"]}


_SHOWN = 100  # lengths.png draws 0-100 tokens; the titles count the sentences beyond


def _plot(histograms: dict, src: str, tgt: str, out_png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), sharex=True)
    for ax, split in zip(axes, ("train", "dev", "test")):
        for lang in (src, tgt):
            h = histograms[f"{split}.{lang}"]
            total = sum(h.values()) or 1
            xs = sorted(h)
            ax.plot(xs, [100 * h[x] / total for x in xs], label=lang, lw=1.2)
        ax.set_title(f"{split} ({sum(histograms[f'{split}.{src}'].values()):,} sentences)" + _cut(histograms, split,
                                                                                               (src, tgt)))
        ax.set_xlabel("tokens per sentence")
        ax.set_xlim(0, _SHOWN)
    axes[0].set_ylabel("% of sentences")
    axes[0].legend()
    fig.tight_layout()
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


def _cut(histograms: dict, split: str, langs: tuple[str, str]) -> str:
    """What the plot of a split leaves out: its sentences longer than _SHOWN tokens, per language, and the longest."""
    beyond = {lang: sum(n for x, n in histograms[f"{split}.{lang}"].items() if int(x) > _SHOWN) for lang in langs}
    if not any(beyond.values()):
        return ""
    longest = max(int(x) for lang in langs for x in histograms[f"{split}.{lang}"])
    counts = ", ".join(f"{lang} {n:,}" for lang, n in beyond.items())
    return f"\nnot drawn: over {_SHOWN} tokens ({counts}), up to {longest}"


def _markdown(report: dict, src: str, tgt: str, png: Path, md: Path) -> str:
    lines = ["# Data report", "", "## Sentence pairs and words after each step", "",
             f"| step | pairs | {src} words | {tgt} words | dropped | why |", "|---|---:|---:|---:|---:|---|"]
    for r in report["steps"]:
        lines.append(f"| {r['step']} | {r['pairs']:,} | {r['src_words']:,} | {r['tgt_words']:,} | {r['dropped']:,} | "
                     f"{r.get('detail', '')} |")
    if "unicode_normalised" in report:
        lines += ["", "Lines changed by Unicode normalisation (data.unicode), either side: " + ", ".join(
            f"{split} {n:,}" for split, n in report["unicode_normalised"].items()) + "."]
    punct = report["punctuation"]
    lines += ["", "Lines whose punctuation was normalised before tokenization (tokenize.normalize_punctuation): " + (
        ", ".join(f"{text} {n:,}" for text, n in punct["lines_changed"].items()) + "." if punct["normalize_punctuation"]
        else "none (off).")]
    if len(report["corpora"]) > 1:
        steps = list(next(iter(report["corpora"].values())))
        lines += ["", "## Per corpus: sentence pairs (and " + src + " words) after each step", "",
                  "| corpus | " + " | ".join(steps) + " |", "|---|" + "---:|" * len(steps)]
        for name, c in report["corpora"].items():
            lines.append(f"| {name} | " + " | ".join(f"{c[s]['pairs']:,} ({c[s]['src_words']:,})" for s in steps) + " |")
    lines += ["", f"## Shortlists ({report['shortlist']['src']:,} {src} and {report['shortlist']['tgt']:,} {tgt} words)",
              "", "| text | sentences | running words | outside the shortlist ([UNK]) | coverage |",
              "|---|---:|---:|---:|---:|"]
    for key, c in report["coverage"].items():
        lines.append(f"| {key} | {c['sentences']:,} | {c['words']:,} | {c['unk']:,} ({100 * c['unk_rate']:.2f} %) | "
                     f"{100 * c['coverage']:.2f} % |")
    if report["binarized"]:
        lines += ["", "## Binarized training sets (what training memory-maps)", "",
                  "| set | pairs | ids | source ids | target ids | on disk | binarize time |",
                  "|---|---:|---|---:|---:|---:|---:|"]
        lines += [f"| {name} | {b['pairs']:,} | {b['dtype']} | {b['src_tokens']:,} | {b['tgt_tokens']:,} | "
                  f"{b['bytes'] / 2**20:,.2f} MiB | {b['seconds']:.1f} s |" for name, b in report["binarized"].items()]
    lines += ["", "## Sentence lengths", "", f"![length histograms]({os.path.relpath(png, md.parent)})", ""]
    for key, h in report["histograms"].items():
        n = sum(h.values())
        longer = {k: sum(v for length, v in h.items() if int(length) > k) for k in (30, 50)}
        lines.append(f"- {key}: {n:,} sentences, {100 * longer[30] / max(n, 1):.1f} % over 30 tokens, "
                     f"{100 * longer[50] / max(n, 1):.1f} % over 50")
    if "lium_devtest" in report.get("corpus", {}):
        lines += ["", "LIUM's tokenized dev/test (dev+test.tgz), line counts: " +
                  ", ".join(f"{k} {v:,}" for k, v in report["corpus"]["lium_devtest"].items())]
    return "\n".join(lines) + "\n"
