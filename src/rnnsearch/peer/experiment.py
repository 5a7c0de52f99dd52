"""Our models against JoeyNMT 2.3.0 (the peer) at equal wall-clock training time, on the same data.

`run_peer` trains JoeyNMT on exactly our tokenized files (the ≤N training set of `peer.model`, our dev and test
sets) with the same shortlist size, for as many seconds as our `peer.model` trained (read from its
train_stats.json: the training loop's wall time, validations included), then decodes the test set with the same
beam width. It runs in the peer's own Python (`peer.python`) through `peer_joeynmt.py`; the model config is the
peer benchmark's (`peer.config`, workflow/resources/joeynmt_rnnsearch.yaml) with only paths, the shortlist size,
the beam, the thread count and the seed rewritten. The output is detokenized with the same Moses detokenizer
as ours.

`run_compare` scores every system the same way (sacreBLEU and chrF on detokenized text against the raw
references, one signature each) and writes the table.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
from dataclasses import astuple, dataclass
from pathlib import Path

import yaml

from rnnsearch.settings import VocabConfig
from rnnsearch.textio import (
    InputError,
    read_lines,
    write_json_atomic,
    write_lines_atomic,
)

log = logging.getLogger("rnnsearch.peer")
DRIVER = Path(__file__).with_name("joeynmt_driver.py")


def joeynmt_config(base: dict, model_dir: Path, train: str, dev: str, test: str, src: str, tgt: str,
                   vocab: tuple[int, int], beam: int, seed: int) -> dict:
    """The peer's config with our data, shortlist size, beam and seed; no validation inside the timed window."""
    cfg = json.loads(json.dumps(base))  # deep copy
    cfg["model_dir"] = str(model_dir)
    cfg["random_seed"] = seed
    cfg["data"].update(train=train, dev=dev, test=test)
    for side, lang, size in (("src", src, vocab[0]), ("trg", tgt, vocab[1])):
        cfg["data"][side].update(lang=lang, voc_limit=size)
    cfg["training"].update(updates=10**9, epochs=10**6, validation_freq=10**9, overwrite=True)
    cfg["testing"].update(beam_size=beam, load_model=str(model_dir / "latest.ckpt"))
    return cfg


def _run(python: str, args: list[str], threads: int, log_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with open(log_path, "a", encoding="utf-8") as f:
        p = subprocess.run([python, str(DRIVER), *args], stdout=f, stderr=subprocess.STDOUT, env=env)
    if p.returncode != 0:
        tail = "\n".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-15:])
        raise InputError(f"JoeyNMT ({python} {DRIVER.name} {' '.join(args)}) failed with exit status "
                         f"{p.returncode}; the end of {log_path}:\n{tail}")


def check_peer_python(python: str) -> str:
    """The JoeyNMT version importable by `python`, or a clear error."""
    if not python:
        raise InputError("'peer.python' is unset: set it to a Python that can import joeynmt 2.3.0 "
                         "(pip install torch joeynmt==2.3.0 importlib_metadata in its own venv)")
    try:
        p = subprocess.run([python, "-c", "import joeynmt, torch; print(joeynmt.__version__, torch.__version__)"],
                           capture_output=True, text=True, timeout=120)
    except OSError as e:
        raise InputError(f"'peer.python': cannot run {python} ({e}); install JoeyNMT 2.3.0 in "
                         "its own venv: pip install torch joeynmt==2.3.0 importlib_metadata") from None
    if p.returncode != 0:
        raise InputError(f"'peer.python': {python} cannot import joeynmt ({p.stderr.strip().splitlines()[-1:]}); "
                         "install JoeyNMT 2.3.0 in its own venv: pip install torch joeynmt==2.3.0 importlib_metadata")
    return p.stdout.strip()


@dataclass(frozen=True)
class PeerData:
    """peer.model's train_stats.json (its training time) and our tokenized text as prefixes (<prefix>.<lang>)."""

    train_stats: str
    train: str
    dev: str
    test: str


@dataclass(frozen=True)
class PeerSettings:
    """Ours that the peer takes: the language pair, decode.beam, train.threads and the seed."""

    src: str
    tgt: str
    beam: int
    threads: int
    seed: int


def run_peer(peer: dict, data: PeerData, vocab: VocabConfig, settings: PeerSettings, out_dir: str) -> dict:
    """Train JoeyNMT (`peer`: params.yaml's python and config) for our model's training time on our `data`,
    decode its test set; writes test.hyp(.tok) and stats.json."""
    from rnnsearch.data.text import detokenize_lines

    python, base_config, train_stats, train, dev, test = peer["python"], peer["config"], *astuple(data)
    src, tgt, beam, threads, seed = astuple(settings)
    vocab = (vocab.src_size, vocab.tgt_size)

    versions = check_peer_python(python)
    seconds = json.loads(Path(train_stats).read_text())["seconds"]
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    base = yaml.safe_load(Path(base_config).read_text(encoding="utf-8"))
    cfg = joeynmt_config(base, out / "model", *(str(Path(p).resolve()) for p in (train, dev, test)), src, tgt,
                         vocab, beam, seed)
    (out / "joeynmt.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    log_path = out / "joeynmt.log"
    log_path.write_text("")
    log.info("JoeyNMT %s (torch) from %s: training for %.0f s, our training time (%s)", versions, python, seconds,
             train_stats)
    _run(python, [str(out / "train_stats.json"), str(seconds), "train", str(out / "joeynmt.yaml"), "-t"], threads,
         log_path)
    trained = json.loads((out / "train_stats.json").read_text())
    log.info("JoeyNMT trained %d updates in %.0f s (%.0f words/s)", trained["updates"], trained["train_seconds"],
             (trained["source_words"] + trained["target_words"]) / trained["train_seconds"])
    _run(python, [str(out / "test_stats.json"), "0", "test", str(out / "joeynmt.yaml"), "-o", str(out / "hyp")],
         threads, log_path)
    decoded = json.loads((out / "test_stats.json").read_text())
    hyps = read_lines(out / "hyp.test")
    write_lines_atomic(out / "test.hyp.tok", hyps)
    write_lines_atomic(out / "test.hyp", detokenize_lines(hyps, tgt))
    stats = {"system": f"JoeyNMT {versions.split()[0]}", "python": python, "config": str(base_config),
             "budget_seconds": seconds, "train_seconds": trained["train_seconds"], "updates": trained["updates"],
             "words": trained["source_words"] + trained["target_words"], "beam": beam, "threads": threads,
             "decode_seconds": decoded["predict_seconds"], "decode_includes": "dev and test sets (JoeyNMT test mode)",
             "peak_rss_mb": max(trained["peak_rss_mb"], decoded["peak_rss_mb"])}
    write_json_atomic(out / "stats.json", stats)
    return stats


def run_compare(system: list[tuple[str, str, str]], ref: str, out_dir: str) -> dict:
    """`system`: (name, detokenized test.hyp, train/peer stats JSON) of each system, `ref` the raw references.
    Writes comparison.json and comparison.md."""
    from rnnsearch.evaluation.score import bleu_chrf, check_aligned

    systems, ref_raw = system, ref

    refs = read_lines(ref_raw)
    rows = []
    for name, hyp_path, stats_path in systems:
        hyps = read_lines(hyp_path)
        check_aligned(hyp_path, hyps, ref_raw, refs)
        stats = json.loads(Path(stats_path).read_text())
        s = bleu_chrf(hyps, refs)
        seconds = stats.get("train_seconds", stats.get("seconds"))
        rows.append({"system": name, "bleu": s["bleu"], "chrf": s["chrf"],
                     "train_seconds": round(seconds, 1), "updates": stats["updates"],
                     "words_per_s": round(stats["words"] / seconds, 1) if stats.get("words") else None,
                     "bleu_signature": s["bleu_signature"], "chrf_signature": s["chrf_signature"]})
    result = {"machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                          "cpus": os.cpu_count()}, "test": ref_raw, "systems": rows}
    lines = ["| system | sacreBLEU | chrF | training time | updates | training words/s (src+tgt) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['system']} | {r['bleu']:.2f} | {r['chrf']:.2f} | {r['train_seconds']:.0f} s | "
                     f"{r['updates']:,} | {r['words_per_s'] if r['words_per_s'] is not None else 'n/a'} |")
    lines += ["", f"Test set: {ref_raw} ({len(refs)} sentences), detokenized output against the raw references.",
              f"BLEU: `{rows[0]['bleu_signature']}`; chrF: `{rows[0]['chrf_signature']}`."]
    write_json_atomic(Path(out_dir) / "comparison.json", result)
    write_lines_atomic(Path(out_dir) / "comparison.md", lines)
    return result
