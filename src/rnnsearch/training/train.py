"""Stage 5: train one model (App. B.2): Adadelta (ε=1e-6, ρ=0.95), minibatches of 80 in the paper's
length-sorted blocks, gradient L2 norm rescaled to at most 1, a fixed update budget or early stopping on dev
BLEU (the paper's RNNsearch-50*).

Writes `model.pt` (the state with the best dev BLEU: model, optimizer, RNG, update count, data position,
config, git commit, vocabularies), a JSON of the learning statistics of Table 2 (updates, epochs, hours,
device, train NLL, dev NLL), the learning and validation curves as TSV, and dvclive metrics.
"""

from __future__ import annotations

import logging
import math
import os
import platform
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from rnnsearch.checkpoint import load_checkpoint, save_checkpoint, write_checkpoint
from rnnsearch.data.batching import Batch, PaperBatches
from rnnsearch.data.binarized import training_pairs
from rnnsearch.data.vocab import Vocab
from rnnsearch.distributed import World, detect, process_device, process_group, started_as
from rnnsearch.model import build_model
from rnnsearch.model.presets import model_config
from rnnsearch.runtime import git_commit, native_bf16_cpu, resolve_device
from rnnsearch.settings import TrainConfig, learning_rate, train_config
from rnnsearch.textio import InputError, Interrupted, read_parallel, write_json_atomic
from rnnsearch.training.optimizers import make_optimizer
from rnnsearch.training.graphs import UpdateGraphs, graphs_wanted
from rnnsearch.training.parallel_graphs import DataParallelGraphs
from rnnsearch.training.records import device_name, hms, live, progress_bar, write_tsv
from rnnsearch.training.scoring import batch_nll, training_loss, validate  # noqa: F401 (batch_nll: imported here too)
from rnnsearch.training.state import (TrainState, best_path, keep_last, link, prune_best, start_or_resume,
                                      stop_on_signals)

log = logging.getLogger("rnnsearch.train")


class Diverged(InputError):
    """The loss or the gradient became NaN or infinite, or the loss exploded: the training stops without writing
    a model."""


# A loss above this many nats per target word (a probability of e^-1000 for the right word: an untrained model
# gives about log K ≈ 10) means the weights have exploded, as they do at a learning rate a million times too large.
MAX_NLL_PER_WORD = 1000.0


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def encode_corpus(src_lines: list[str], tgt_lines: list[str], src_vocab: Vocab, tgt_vocab: Vocab):
    return ([src_vocab.encode(s.split()) for s in src_lines], [tgt_vocab.encode(t.split()) for t in tgt_lines])


@dataclass(frozen=True)
class TrainFiles:
    """A training's text: the ≤N training pairs (`binarized`: the prefix of the binarize stage's files of them,
    memory-mapped; without it the text is read and encoded in memory), the dev set and the two shortlists."""

    src_train: str
    tgt_train: str
    src_dev: str
    tgt_dev: str
    src_vocab: str
    tgt_vocab: str
    binarized: str | None = None


def run_train(model: str, replicate: int, files: TrainFiles, out_dir: str, config: dict,
              continue_from: str | None = None) -> dict:
    """Stage 5: replicate r of `models.<model>` (seed `seed` + r − 1), from `config`, the params keys the stage
    reads; `continue_from`: for a model that `continues` another, that model's final checkpoint.pt."""
    started_as("train.processes", config["train"]["processes"], "train")
    parent = config["models"][model].get("continues")
    if (parent is None) != (continue_from is None):
        raise InputError(f"--continue-from {continue_from} given, but models.{model} continues no model"
                         if parent is None else f"models.{model} continues {parent}: give --continue-from, the "
                         f"final checkpoint.pt of {parent}'s replicate {replicate}")
    text = {"src_lang": config["data"]["src"], "tgt_lang": config["data"]["tgt"], "unicode": config["data"]["unicode"],
            "normalize_punctuation": config["tokenize"]["normalize_punctuation"]}
    return train(model, model_config(config, model), train_config(config, model),
                 config["seed"] + replicate - 1, files, out_dir, text, (parent, continue_from) if parent else None)


def train(name: str, model_cfg: dict, train_cfg: TrainConfig, seed: int, files: TrainFiles, out_dir: str,
          text: dict | None = None, continues: tuple[str, str] | None = None) -> dict:
    """Train `name` with its resolved model config; everything goes under `out_dir`. Every `checkpoint_every`
    updates, and on SIGTERM/SIGINT, the whole state goes to `checkpoint.pt` (the last `keep_checkpoints` of them
    also stay as checkpoint-<update>.pt); running the same training again continues from there and ends with the
    same parameters as an uninterrupted run. Every `validate_every` updates and at the end, the dev set is scored;
    the best state by dev BLEU is kept (best-<update>.pt) and becomes `model.pt`. With `patience` > 0, training
    stops after that many validations without a better dev BLEU. `text` (the language pair, Unicode form and
    punctuation setting of the training text) goes into every checkpoint, for translating a user's sentences the
    way the training text was prepared. `continues` (model, its final checkpoint.pt): start from that finished
    training's state (training/state.py: continue_from), the paper's RNNsearch-50*; its updates count on from the
    parent's. Started by torchrun or srun as N processes (`rnnsearch.distributed`), it trains data-parallel: the
    same updates on the same global minibatches, each process computing the gradient of its share."""
    world = detect()
    device = process_device(resolve_device(train_cfg.device, "train.device"), world)
    with stop_on_signals() as stop, process_group(world, device):  # a SIGTERM while the data loads: update 1
        training = Training(name, model_cfg, train_cfg, seed, files, Path(out_dir), world, device, text, continues)
        training.loop(stop)
        stats, training = training.finish(), None  # its DDP freed before the group closes (process_group)
    return stats


class Training:
    """One process's part of a training: the model, its optimizer, the data, and the `TrainState`. Of several
    data-parallel processes, only the leader (rank 0) validates and writes files."""

    def __init__(self, name: str, model_cfg: dict, train_cfg: TrainConfig, seed: int, files: TrainFiles, out: Path,
                 world: World = World(), device: torch.device | None = None, text: dict | None = None,
                 continues: tuple[str, str] | None = None):
        self.name, self.cfg, self.out, self.world = name, train_cfg, out, world
        seed_everything(seed)  # the same on every process: the same initial weights and minibatches
        torch.set_num_threads(train_cfg.threads)
        self.device = device = device or resolve_device(train_cfg.device, "train.device")
        self.bf16 = train_cfg.precision == "bf16"  # autocast on resolve_device's cuda or cpu
        if self.bf16 and device.type == "cpu" and not native_bf16_cpu() and world.leader:
            log.warning("precision bf16: this CPU has no bf16 matrix instructions (AVX512-BF16 or AMX), so its bf16 "
                        "products are emulated and training will be slower than in fp32")
        vocab_paths = files.src_vocab, files.tgt_vocab
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab = Vocab.load(vocab_paths[0]), Vocab.load(vocab_paths[1])
        self.pairs = training_pairs((files.src_train, files.tgt_train), (src_vocab, tgt_vocab), vocab_paths,
                                    files.binarized)
        self.dev_lines = read_parallel(files.src_dev, files.tgt_dev)
        self.dev_src, self.dev_tgt = encode_corpus(*self.dev_lines, src_vocab, tgt_vocab)
        scale = world.size if train_cfg.scale_batch else 1  # the global minibatch: batch_size, or per process
        batch_size, batch_tokens = train_cfg.batch_size * scale, train_cfg.batch_tokens * scale
        self.config = {"name": name, "model": model_cfg, "train": asdict(train_cfg), "seed": seed,
                       "src_vocab": len(src_vocab), "tgt_vocab": len(tgt_vocab), "global_batch": [batch_size,
                                                                                                   batch_tokens],
                       **({"text": text} if text else {})}  # the training text's languages, Unicode, punctuation
        dtype = torch.float64 if train_cfg.precision == "fp64" else torch.float32
        self.model = build_model(model_cfg, len(src_vocab), len(tgt_vocab)).to(device, dtype)
        self.model.coverage_loss = train_cfg.coverage_loss  # See et al.'s λ, which training_loss adds (scoring.py)
        graphed = graphs_wanted(train_cfg.cuda_graphs, self.model, device, world.size)  # true where impossible: error
        ddp = world.size > 1 and not graphed  # graphed: the gradients are all-reduced between two graphs
        self.net = torch.nn.parallel.DistributedDataParallel(self.model) if ddp else self.model
        self.optimizer = make_optimizer(self.model.parameters(), train_cfg.optimizer, train_cfg.lr, train_cfg.rho,
                                        train_cfg.eps)
        self.batches = PaperBatches(self.pairs, batch_size, train_cfg.sort_batches, seed, batch_tokens)
        vocabs = {"src": (vocab_paths[0], src_vocab), "tgt": (vocab_paths[1], tgt_vocab)}
        resumed = start_or_resume(out, self.config, self.model, self.optimizer, self.batches, device, vocabs,
                                  owner=world.leader, read_by_all=world.barrier, parent=continues)
        self.state = resumed or TrainState()
        graphs_of = UpdateGraphs if world.size == 1 else DataParallelGraphs
        self.graphs = graphs_of(self.model, self.optimizer, self.bf16, train_cfg.clip_norm) if graphed else None
        self.run = {"start": self.state.update, "end": self.state.update, "ended_by": None,
                    "slurm_job": os.environ.get("SLURM_JOB_ID"), "host": platform.node(), "processes": world.size}
        self.state.runs.append(self.run)
        self.commit = git_commit()
        log.info("%s: %s", name, ", ".join(f"{k} {v}" for k, v in self.model.cfg.items()))
        log.info("%s: %s parameters, %d training pairs, %d dev pairs, device %s%s%s, git %s", name,
                 f"{self.model.num_parameters():,}", len(self.pairs), len(self.dev_src), device,
                 " (bf16 autocast)" if self.bf16 else "", ", updates from CUDA graphs" if graphed else "", self.commit)
        self.live = live(out / "dvclive", resume=resumed is not None) if world.leader else None
        self.seconds_before, self.start = self.state.seconds, time.perf_counter()
        if self.state.continued_from and not (out / "checkpoint.pt").exists():
            self.checkpoint(0)  # the parent's final state, this training's first checkpoint

    def seconds(self) -> float:
        """Training time so far, over every run of this training."""
        return self.seconds_before + time.perf_counter() - self.start

    def diverged(self, what: str) -> None:
        """Stop: raise Diverged naming the update and the last checkpoint, which stays as it is."""
        last = self.out / "checkpoint.pt"
        kept = (f"the last checkpoint, {last}, is kept as it was (delete it to start afresh with other settings)"
                if last.exists() else "no checkpoint was written")
        raise Diverged(f"{self.name}: training diverged at update {self.state.update} ({what}); {kept}, and no "
                       "model.pt is written. Try a smaller train.lr or train.clip_norm")

    def save(self, path: Path) -> None:
        if not bool(torch.stack([torch.isfinite(p).all() for p in self.model.parameters()]).all()):
            self.diverged(f"non-finite weights before writing {path.name}")
        self.state.seconds = self.seconds()
        vocab = {"src": self.src_vocab.words, "tgt": self.tgt_vocab.words,  # self-contained for translation
                 **{f"{side}_spm": v.spm for side, v in (("src", self.src_vocab), ("tgt", self.tgt_vocab))
                    if v.spm is not None}}
        cuda_rng = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        save_checkpoint(path, self.model, self.optimizer, self.state.update, self.batches.state(), self.config,
                        progress=self.state.to_dict(), rng=torch.get_rng_state(), git=self.commit,
                        cuda_rng=cuda_rng, vocab=vocab)

    def update(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, float]:
        """One update (App. B.2): the mean over sentences of the summed word NLL, its gradient's L2 norm
        rescaled to at most clip_norm, one optimizer step; eagerly or from CUDA graphs (training/graphs.py; of
        several processes, training/parallel_graphs.py).

        Data-parallel, each process takes its share of `batch` and scales its loss by N / B: DDP averages the N
        gradients, giving the gradient of the whole minibatch's mean loss on every process, whose norm is the
        global norm (from graphs: scaled by 1 / B and summed, the same gradient). Returns the share's summed NLL, the gradient norm before clipping and the share's weight."""
        lr, world, rows = learning_rate(self.cfg, self.state.update + 1), self.world, batch.x.size(0)
        if isinstance(self.graphs, UpdateGraphs):
            return (*self.graphs(batch, lr), 1.0)
        part, weight = batch.share(world.rank, world.size) if world.size > 1 else (batch, 1.0)
        if self.graphs is not None:  # data-parallel graphs: the same arithmetic, the all-reduce between graphs
            return (*self.graphs(part, weight, rows, lr), weight)
        part = part.to(self.device)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            loss = training_loss(self.net, part)
        self.optimizer.zero_grad(set_to_none=True)
        (loss * (weight * world.size) / rows).backward()  # one process: loss / rows (× 1.0, exact)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        return loss.detach(), norm, weight

    def step(self, batch: Batch, stop: dict) -> int:
        """One update; its loss and words go into the log window, and a diverged loss or gradient stops the
        training. Returns the signal that stops the training after this update (0: none), agreed by all."""
        loss, norm, weight = self.update(batch)
        state, world = self.state, self.world
        state.update += 1
        if world.size == 1:
            loss_value, norm_value = torch.stack([loss.float(), norm.float()]).tolist()  # one device sync
            signal_ = stop.get("signal", 0)
        else:  # one collective: the minibatch's loss, and a signal any process received
            loss_value, signal_ = world.agree(loss * weight, stop.get("signal", 0))
            norm_value = float(norm)
        per_word = loss_value / batch.target_words
        if not (math.isfinite(loss_value) and math.isfinite(norm_value)) or per_word > MAX_NLL_PER_WORD:
            self.diverged(f"loss {per_word:.3g} nats per target word, gradient norm {norm_value:.3g}")
        words = batch.source_words + batch.target_words
        state.window[0] += loss_value
        state.window[1] += batch.x.size(0)
        state.window[2] += words
        state.words += words
        return signal_

    def loop(self, stop: dict) -> None:
        """Updates until the budget, early stopping or a signal (which saves a checkpoint and raises Interrupted)."""
        state, cfg = self.state, self.cfg
        max_updates, every, validate_every = cfg.max_updates, cfg.checkpoint_every, cfg.validate_every
        done = state.update >= max_updates or state.patience_spent(cfg.patience)
        bar = progress_bar(state.update, max_updates, self.name) if self.world.leader else None
        self.t_window, self.first_update = self.start, state.update
        self.model.train()
        for batch in self.batches if not done else ():
            signal_ = self.step(batch, stop)
            update = state.update
            if bar is not None:
                bar.update(1)
            if update % cfg.log_every == 0 or update == max_updates:
                self.log_window()
            if update >= max_updates:
                break
            if validate_every and update % validate_every == 0 and self.world.decide(
                    self.world.leader and self.validate_and_select(), self.device):
                log.info("%s: early stop at update %d: dev BLEU has not improved for %d validations", self.name,
                         update, state.bad)
                break
            if signal_ or (every and update % every == 0):
                self.checkpoint(signal_)
        if bar is not None:
            bar.close()

    def log_window(self) -> None:
        """The log line and learning-curve row of the updates since the last one."""
        state, now = self.state, time.perf_counter()
        update, curve, window, max_updates = state.update, state.curve, state.window, self.cfg.max_updates
        nll, words_per_s = window[0] / window[1], window[2] / (now - self.t_window)
        eta = (now - self.start) / (update - self.first_update) * (max_updates - update)
        log.info("%s update %d/%d  epoch %.2f  train NLL/sent %.2f  %.0f words/s  %.2f updates/s  ETA %s%s",
                 self.name, update, max_updates, self.batches.position, nll, words_per_s,
                 (update - max(self.first_update, curve[-1]["update"] if curve else 0)) / (now - self.t_window),
                 hms(eta), self.gpu_memory())
        curve.append({"update": update, "epoch": round(self.batches.position, 4), "train_nll": round(nll, 4),
                      "words_per_s": round(words_per_s, 1), "seconds": round(self.seconds_before + now - self.start, 2)})
        if self.live:
            self.live.step = update
            self.live.log_metric("train/nll_per_sentence", nll)
            self.live.log_metric("train/words_per_s", words_per_s)
            self.live.make_summary()
        window[:] = [0.0, 0, 0]
        self.t_window = now

    def gpu_memory(self) -> str:
        """On CUDA, the memory the allocator holds and the graphs recorded so far, for the log line."""
        if self.device.type != "cuda":
            return ""
        graphs = f", {len(self.graphs.graphs)} CUDA graphs" if self.graphs is not None else ""
        return (f"  GPU memory {torch.cuda.memory_allocated(self.device) / 2**30:.1f} GB allocated, "
                f"{torch.cuda.memory_reserved(self.device) / 2**30:.1f} GB reserved{graphs}")

    def checkpoint(self, signal_: int) -> None:
        """checkpoint.pt (and its dated link), written by the leader; after a signal, also the end of this run
        on every process (once the checkpoint is written): Interrupted."""
        update = self.state.update
        self.run.update(end=update, ended_by=f"signal {signal_}" if signal_ else None)
        path = self.out / "checkpoint.pt"
        if self.world.leader:
            self.save(path)
            keep_last(self.out, update, self.cfg.keep_checkpoints)
            prune_best(self.out, self.state.best)
        if signal_:
            self.world.barrier()  # a launcher ends every process when one exits: not before the checkpoint is whole
            if self.world.leader:
                log.warning("%s: signal %d at update %d: checkpoint saved to %s; rerun to continue",
                            self.name, signal_, update, path)
            raise Interrupted(f"{self.name}: interrupted at update {update}")

    def validate_and_select(self) -> bool:
        """Score the dev set and keep the best state (best-<update>.pt); True when patience has run out."""
        state, update, beam = self.state, self.state.update, self.cfg.validate_beam
        started = time.perf_counter()
        v = validate(self.model, self.dev_src, self.dev_tgt, *self.dev_lines, self.tgt_vocab, beam,
                     (self.cfg.max_len_a, self.cfg.max_len_b), self.device)
        seconds, best = time.perf_counter() - started, state.best  # better: a higher dev BLEU, or the same BLEU (e.g. 0 early on) and a lower NLL
        improved = math.isfinite(v["nll_per_sentence"]) and (  # a non-finite dev NLL is never selected
            best is None or (v["bleu"], -v["nll_per_sentence"]) > (best["bleu"], -best["nll"]))
        if improved:
            state.best, state.bad = {"update": update, "bleu": v["bleu"], "nll": v["nll_per_sentence"]}, 0
        else:
            state.bad += 1
        row = {"update": update, "epoch": round(self.batches.position, 4), "dev_nll": round(v["nll_per_sentence"], 4),
               "dev_nll_per_word": round(v["nll_per_word"], 4), "dev_bleu": round(v["bleu"], 2)}
        state.validations.append(row)
        log.info("%s update %d  dev NLL/sent %.2f  NLL/word %.3f  BLEU %.2f (beam %d) in %.1f s  %s", self.name,
                 update, v["nll_per_sentence"], v["nll_per_word"], v["bleu"], beam, seconds,
                 "new best" if improved else f"best {state.best['bleu']:.2f} at update "
                 f"{state.best['update']}, {state.bad} without improvement")
        for k, (s, r, h) in enumerate(v["samples"], 1):
            log.info("%s sample %d\n    source:    %s\n    reference: %s\n    output:    %s", self.name, k, s, r, h)
        if self.live:
            self.live.step = update
            for key in ("dev_nll", "dev_nll_per_word", "dev_bleu"):
                self.live.log_metric(key.replace("_", "/", 1), row[key])
            self.live.make_summary()
        if improved:
            self.save(best_path(self.out, update))
        return state.patience_spent(self.cfg.patience)

    def finish(self) -> dict | None:
        """Validate the final state, keep it in checkpoint.pt (marked finished), link model.pt to the best
        validated state and write the learning statistics.

        A job killed after this point (Slurm's time limit while Snakemake wraps up, which then deletes the outputs
        of the "failed" job) is completed by the next attempt without training again. Only the leader does this
        (the others return None)."""
        if not self.world.leader:
            return None
        state, out = self.state, self.out
        seconds = self.seconds()
        if not state.validations or state.validations[-1]["update"] != state.update:
            self.validate_and_select()  # the final state is always validated
        early = state.patience_spent(self.cfg.patience)
        self.run.update(end=state.update, ended_by="early stop" if early else "update budget")
        if state.best is None:
            self.diverged("no validation had a finite dev NLL")
        state.finished = True
        self.save(out / "checkpoint.pt")
        prune_best(out, state.best)
        best = best_path(out, state.best["update"])
        selected = load_checkpoint(best, self.device)
        self.model.load_state_dict(selected["model"])  # the selected model
        selected["progress"]["runs"] = state.runs  # saved mid-run: the whole training's runs, as train_stats.json
        write_checkpoint(best, selected)
        stats = self.stats(seconds, early and state.update < self.cfg.max_updates)
        link(best, out / "model.pt")
        write_json_atomic(out / "train_stats.json", stats)
        write_tsv(out / "learning_curve.tsv", state.curve)
        write_tsv(out / "validation.tsv", state.validations)
        if self.live:
            self.live.summary.update({"dev/nll_per_sentence": stats["dev_nll"], "dev/bleu": stats["dev_bleu"]})
            self.live.end()
        log.info("%s done: %d updates in %s; model.pt is update %d: dev BLEU %.2f, NLL/sent %.2f (%.3f per word)",
                 self.name, state.update, hms(seconds), stats["selected_update"], stats["dev_bleu"],
                 stats["dev_nll"], stats["dev_nll_per_word"])
        if self.graphs is not None:
            log.info("%s: updates replayed from %d CUDA graphs (%d padded minibatch shapes seen in this run)",
                     self.name, len(self.graphs.graphs), len(self.graphs.seen))
        return stats

    def stats(self, seconds: float, early_stopped: bool) -> dict:
        """Table 2's row: the learning statistics of the training and of the selected (best) state."""
        state = self.state
        selected = next(v for v in state.validations if v["update"] == state.best["update"])
        return {
            "model": self.name, "arch": self.config["model"]["arch"], "seed": self.config["seed"],
            "parameters": self.model.num_parameters(),
            "updates": state.update, "epochs": round(self.batches.position, 4), "hours": seconds / 3600,
            "seconds": round(seconds, 2), "device": device_name(self.device), "threads": self.cfg.threads,
            "train_nll": state.smoothed_train_nll(), "dev_nll": selected["dev_nll"],
            "dev_nll_per_word": selected["dev_nll_per_word"], "dev_bleu": selected["dev_bleu"],
            "selected_update": state.best["update"], "early_stopped": early_stopped,
            "train_pairs": len(self.pairs), "git": self.commit, "runs": state.runs,
            "words": state.words,  # source + target words trained on (all updates)
            "continued_from": state.continued_from,  # the parent's final state, where updates, runs and time began
        }
