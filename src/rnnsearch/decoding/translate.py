"""Stage 6: translate the test set with beam search, twice: all sentences ([UNK] allowed), and the No-UNK
subset with [UNK] forbidden (Table 1's two columns). Saves each translation's attention matrix α."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from rnnsearch.checkpoint import check_vocabs, load_checkpoint, model_of
from rnnsearch.data.text import detokenize_lines
from rnnsearch.data.vocab import Vocab
from rnnsearch.decoding.search import translate_ids
from rnnsearch.decoding.user import UserOptions, UserText, translate_user
from rnnsearch.distributed import World, detect, process_device, process_group, share_work, started_as
from rnnsearch.evaluation.bleu import no_unk_ids
from rnnsearch.runtime import resolve_device
from rnnsearch.settings import DecodeConfig
from rnnsearch.textio import (
    InputError,
    atomic_path,
    read_lines,
    write_json_atomic,
    write_lines_atomic,
)

log = logging.getLogger("rnnsearch.translate")


def _progress(total: int, desc: str):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total, desc=desc, unit="sent", mininterval=5, leave=False, disable=None)  # off without a TTY


@dataclass(frozen=True)
class TestFiles:
    """The tokenized test set (`src`, references `ref`) and the shortlists it is encoded with."""

    src: str | None = None
    ref: str | None = None
    src_vocab: str | None = None
    tgt_vocab: str | None = None


@dataclass(frozen=True)
class Filed:
    """The key of `models` the translations are filed under (--model; None: the checkpoint's), and for an entry
    that decodes another model (`decodes`), that model, whose checkpoints it takes, and its own `decode:` settings."""

    model: str | None = None
    decodes: str | None = None
    own: dict | None = None


def translate(checkpoint: str, out_dir: str | None, test: TestFiles, text: UserText, opts: UserOptions,
              decode: DecodeConfig | None = None, detok_lang: str | None = None, filed: Filed = Filed()) -> dict | None:
    """The translate stage: with `out_dir`, stage 6 (`run_translate`: the test set with params.yaml's `decode`,
    under the entry's own (`models.<model>.decode`), detokenized for `detok_lang`, data.tgt); without, a user's
    sentences (`text`) with the search `opts` of the command line (rnnsearch.decoding.user)."""
    if not out_dir:
        return translate_user(checkpoint, text, opts, test.src_vocab, test.tgt_vocab)
    missing = [x for x in ("src", "ref", "src_vocab", "tgt_vocab") if not getattr(test, x)]
    if missing:
        raise InputError("the translate stage needs " + ", ".join("--" + x.replace("_", "-") for x in missing))
    decode = replace(decode, **(filed.own or {}))
    started_as("decode.processes", decode.processes, "translate")
    return run_translate(checkpoint, test, out_dir, decode, detok_lang, filed)


def run_translate(checkpoint: str, test: TestFiles, out_dir: str, decode: DecodeConfig, tgt_lang: str,
                  filed: Filed = Filed()) -> dict | None:
    """Started by torchrun or srun as N processes (`decode.processes`; `rnnsearch.distributed`), each translates
    every N-th sentence on its own device and process 0 writes the whole (the others return None), filed as
    `filed` says."""
    world = detect()
    device = process_device(resolve_device(decode.device, "decode.device"), world)
    with process_group(world, torch.device("cpu"), "translation"):  # gloo: the translations gather on process 0
        return _translate(checkpoint, test, Path(out_dir), decode, tgt_lang, filed, world, device)


def _translate(checkpoint: str, test: TestFiles, out: Path, decode: DecodeConfig, tgt_lang: str, filed: Filed,
               world: World, device) -> dict | None:
    torch.set_num_threads(decode.threads)
    state = load_checkpoint(checkpoint, device)
    model, config = model_of(state, checkpoint, device)
    trained = filed.decodes or filed.model  # the model whose checkpoint this must be (None: any)
    if trained not in (None, config["name"]):
        raise InputError(f"{checkpoint}: a checkpoint of {config['name']}, but --model {filed.model} decodes "
                         f"{trained}'s")
    name = filed.model or config["name"]
    src_vocab, tgt_vocab = Vocab.load(test.src_vocab), Vocab.load(test.tgt_vocab)
    check_vocabs(state, checkpoint, src=(test.src_vocab, src_vocab), tgt=(test.tgt_vocab, tgt_vocab))
    src_tok, ref_tok = read_lines(test.src), read_lines(test.ref)
    src_ids = [src_vocab.encode(s.split()) for s in src_tok]
    opts = dict(beam=decode.beam, batch_size=decode.batch_size, max_len_a=decode.max_len_a,
                max_len_b=decode.max_len_b, length_norm=decode.length_norm, device=device,
                length_penalty=decode.length_penalty, coverage_penalty=decode.coverage_penalty)

    start = time.perf_counter()
    bar = _progress(len(src_ids[:: world.size]), f"{config['name']} beam {opts['beam']}") if world.leader else None
    hyps = share_work(world, src_ids, lambda part: translate_ids(model, part, forbid_unk=False, progress=bar, **opts))
    seconds_all = time.perf_counter() - start
    ids = no_unk_ids(src_tok, ref_tok, src_vocab, tgt_vocab)
    nounk = share_work(world, [src_ids[i] for i in ids],
                       lambda part: translate_ids(model, part, forbid_unk=True, progress=bar, **opts))
    if bar is not None:
        bar.close()
    if not world.leader:
        return None

    hyp_tok = [" ".join(tgt_vocab.decode(h.tokens)) for h in hyps]
    write_lines_atomic(out / "test.hyp.tok", hyp_tok)
    write_lines_atomic(out / "test.hyp", detokenize_lines(hyp_tok, tgt_lang))
    nk_tok = [" ".join(tgt_vocab.decode(h.tokens)) for h in nounk]
    write_lines_atomic(out / "nounk.hyp.tok", nk_tok)
    write_lines_atomic(out / "nounk.hyp", detokenize_lines(nk_tok, tgt_lang))
    write_json_atomic(out / "nounk.json", {"ids": ids, "definition": "no out-of-shortlist word in source or reference"})
    with atomic_path(out / "attention.npz") as tmp, open(tmp, "wb") as f:
        # α_ij of each translation, rows = generated words (</s> included), columns = source words (</s> included);
        # with a subword vocabulary rows and columns are pieces, listed under "src.<i>" and "hyp.<i>"
        alphas = {str(i): h.alpha.numpy().astype(np.float16) for i, h in enumerate(hyps) if h.alpha is not None}
        if src_vocab.spm is not None:
            for i, h in enumerate(hyps):
                if h.alpha is not None:
                    alphas[f"src.{i}"] = np.array(src_vocab.units(src_tok[i].split()) + ["</s>"])
                    alphas[f"hyp.{i}"] = np.array(tgt_vocab.decode(h.tokens, units=True) + ["</s>"])
        np.savez_compressed(f, **alphas)
    stats = {"model": name, "arch": config["model"]["arch"], "seed": config["seed"], "sentences": len(src_ids), "beam": opts["beam"], "batch_size": opts["batch_size"],
             "seconds_all": round(seconds_all, 3), "sentences_per_s": round(len(src_ids) / seconds_all, 2),
             "nounk_sentences": len(ids), "device": str(device), "threads": decode.threads,
             **({"processes": world.size} if world.size > 1 else {}),
             **({"decodes": config["name"]} if config["name"] != name else {}),  # another model's checkpoint
             **({k: opts[k] for k in ("length_norm", "length_penalty", "coverage_penalty")}
                if opts["length_penalty"] or opts["coverage_penalty"] else {})}  # GNMT's ranking, where set
    write_json_atomic(out / "decode_stats.json", stats)
    log.info("%s: %d sentences in %.1f s (%.1f sent/s, beam %d); No-UNK subset: %d sentences",
             name, len(src_ids), seconds_all, stats["sentences_per_s"], opts["beam"], len(ids))
    return stats
