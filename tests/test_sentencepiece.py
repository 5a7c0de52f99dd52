"""vocab.kind: sentencepiece, the subword ablation: pieces trained on the merged word counts, words segmented in
`encode` and joined back in `decode`, models and checkpoints carrying the piece model; the whole DAG on it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rnnsearch.settings import VocabConfig
from rnnsearch import config as cfg
from rnnsearch.checkpoint import vocabs_of
from rnnsearch.data.vocab import (
    EOS_ID,
    UNK_ID,
    Vocab,
    count_words,
    run_vocab,
    spm_path,
    train_sentencepiece,
)

from .conftest import REPO, repo_copy, run

BIN = Path(sys.executable).parent
TEXT = [f"the {a} house{'s' if i % 2 else ''} of {b} were {c}ly {a}er than before ."
        for i, (a, b, c) in enumerate((x, y, z) for x in ("small", "tall", "green", "old") for y in
                                      ("Anna", "Paul", "the town") for z in ("quick", "slow", "sad"))]


def test_pieces_are_trained_deterministically_and_words_survive_the_round_trip():
    counts = sorted(count_words(TEXT).items())
    a, totals = train_sentencepiece(iter(counts), 60, seed=3)
    b, _ = train_sentencepiece(iter(counts), 60, seed=3)
    assert a.spm == b.spm and a.words == b.words and a.words[:3] == ["<pad>", "</s>", "[UNK]"]
    assert totals == {"types": len(counts), "tokens": sum(c for _, c in counts)}
    words = "the tallest houses of Paul were sadly greener .".split()  # unseen words, seen characters
    ids = a.encode(words)
    assert ids[-1] == EOS_ID and UNK_ID not in ids and len(ids) > len(words) + 1  # some words became several pieces
    assert a.decode(ids) == words
    assert "".join(a.decode(ids, units=True)).replace("\u2581", " ").split() == words
    assert "houses" in a and "Zürich" not in a  # Z, ü: characters the pieces never saw
    assert UNK_ID in a.encode(["Zürich"])


def test_the_vocab_stage_saves_the_model_beside_the_tsv_and_a_shortlist_removes_it(tmp_path):
    (tmp_path / "t.txt").write_text("".join(x + "\n" for x in TEXT))
    stats = run_vocab([tmp_path / "t.txt"], [tmp_path / "t.txt"], tmp_path / "vocab.en.tsv", tmp_path / "vocab.fr.tsv",
                      VocabConfig("sentencepiece", 50, 50), tmp_path / "v.json", seed=1)
    assert stats["src"]["kind"] == "sentencepiece" and stats["src"]["coverage"] == 1.0
    loaded = Vocab.load(tmp_path / "vocab.en.tsv")
    assert loaded.spm == spm_path(tmp_path / "vocab.en.tsv").read_bytes() and loaded.decode(loaded.encode(["tall"])) == ["tall"]
    state = {"vocab": {"src": loaded.words, "tgt": loaded.words, "src_spm": loaded.spm, "tgt_spm": loaded.spm}}
    torch.save(state, tmp_path / "ckpt.pt")  # what a checkpoint stores, through torch's safe loader
    src, _ = vocabs_of(torch.load(tmp_path / "ckpt.pt", weights_only=True), "ckpt.pt")
    assert src.encode(["taller"]) == loaded.encode(["taller"])
    run_vocab([tmp_path / "t.txt"], [tmp_path / "t.txt"], tmp_path / "vocab.en.tsv", tmp_path / "vocab.fr.tsv",
              VocabConfig("shortlist", 50, 50))
    assert not spm_path(tmp_path / "vocab.en.tsv").exists() and Vocab.load(tmp_path / "vocab.en.tsv").spm is None


def test_subwords_need_no_word_alignment_gold():
    config = cfg.merge(cfg.load_params([REPO / "params.yaml"]), {"vocab": {"kind": "sentencepiece"}})
    with pytest.raises(cfg.ConfigError, match=r"'aer.gold': word alignments cannot score the attention of a subword"):
        cfg.validate(config)


@pytest.mark.slow
def test_the_whole_dag_runs_on_subwords(tmp_path):
    ws = repo_copy(tmp_path, {"vocab": {"kind": "sentencepiece", "src_size": 200, "tgt_size": 200},
                              "aer": {"gold": "none"}, "figures": {"alignment_model": "rnnsearch-30"},
                              "prepare": {"shards": 1},  # sharding: test_workflow.py, test_dvc.py, test_wmt14.py
                              "peer": {"model": "rnnsearch-30"},  # one model: the others' jobs are its rules
                              "remove": ["models.rnnencdec-30", "models.rnnencdec-50", "models.rnnsearch-50"]})
    p = run(["snakemake", "--cores", "2", "all"], ws, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (ws / "results/data/vocab.en.spm").exists() and (ws / "results/tables/table1.md").exists()
    hyps = (ws / "results/translations/rnnsearch-30/replicate1/test.hyp.tok").read_text()
    assert "\u2581" not in hyps and len(hyps.splitlines()) == 80  # words, not pieces, reach BLEU
    vocab = json.loads((ws / "results/data/vocab.json").read_text())
    assert vocab["src"]["kind"] == "sentencepiece" and vocab["src"]["shortlist"] <= 200
    with np.load(ws / "results/translations/rnnsearch-30/replicate1/attention.npz") as npz:
        src0, alpha0 = npz["src.0"].tolist(), npz["0"]
    assert src0[-1] == "</s>" and alpha0.shape[1] == len(src0) and any(u.startswith("\u2581") for u in src0)
    assert (ws / "results/figures/alignment_a.png").stat().st_size > 1000
    out = subprocess.run([str(BIN / "rnnsearch"), "translate", "--checkpoint", "results/models/rnnsearch-30/replicate1/model.pt",
                          "--beam", "2"], input="the house is small .\n", cwd=ws, capture_output=True, text=True)
    assert out.returncode == 0 and "\u2581" not in out.stdout and out.stdout.strip(), out.stderr[-2000:]
