"""What training's validation and the translate stage need of scoring, apart from the score stage's module (so
that a change of the score stage's measures reruns no training and no translation): tokenized BLEU and the
No-UNK subset of Table 1."""

from __future__ import annotations

from sacrebleu.metrics import BLEU

from rnnsearch.data.vocab import Vocab


def no_unk_ids(src_tok: list[str], ref_tok: list[str], src_vocab: Vocab, tgt_vocab: Vocab) -> list[int]:
    """Sentences whose source and reference words are all in the shortlists (Table 1, "No UNK")."""
    return [i for i, (s, r) in enumerate(zip(src_tok, ref_tok))
            if all(w in src_vocab for w in s.split()) and all(w in tgt_vocab for w in r.split())]


def tokenized_bleu(hyps: list[str], refs: list[str]):
    return BLEU(tokenize="none", force=True).corpus_score(hyps, [refs])
