"""Typed settings of the stages that run the model: frozen dataclasses built once from the validated params
(`rnnsearch.config` validates them against workflow/schemas/params.schema.yaml, which documents every key)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class TrainConfig:
    """`train:` of params.yaml with a model's own `max_updates`, `patience` and `precision` (App. B.2; the schema documents
    each key), and decode's output limit for validation."""

    optimizer: str
    lr: float
    lr_decay: float
    rho: float
    eps: float
    batch_size: int
    batch_tokens: int
    scale_batch: bool
    sort_batches: int
    clip_norm: float
    coverage_loss: float  # See et al. (2017)'s λ (rnnsearch.training.scoring.training_loss); 0: the paper's NLL alone
    max_updates: int
    patience: int
    log_every: int
    checkpoint_every: int
    keep_checkpoints: int
    validate_every: int
    validate_beam: int
    device: str
    precision: str
    threads: int
    cuda_graphs: str | bool
    max_len_a: float  # decode.max_len_a and max_len_b: the output limit a × source length + b of validation
    max_len_b: int


def last_full_lr_update(max_updates: int, lr_decay: float) -> float:
    """The last update taken at the full train.lr: train.lr_decay lowers it over the last round(max_updates ×
    lr_decay) updates; with none of them (lr_decay 0, the paper's) every update is (math.inf)."""
    span = round(max_updates * lr_decay)
    return max_updates - span if span > 0 else math.inf


def learning_rate(cfg: TrainConfig, update: int) -> float:
    """The step size of update `update` (from 1): train.lr, and over the last `lr_decay` of max_updates a linear
    fall towards 0 (the last update takes lr / (span + 1)); lr_decay 0 keeps lr throughout (the paper)."""
    last_full = last_full_lr_update(cfg.max_updates, cfg.lr_decay)
    if update <= last_full:
        return cfg.lr
    return cfg.lr * max(cfg.max_updates - update + 1, 1) / (cfg.max_updates - last_full + 1)


@dataclass(frozen=True)
class DecodeConfig:
    """`decode:` of params.yaml: beam search of the test set (§3)."""

    beam: int
    batch_size: int
    max_len_a: float
    max_len_b: int
    length_norm: bool
    device: str
    threads: int
    processes: int
    length_penalty: float = 0.0  # GNMT's α and β (Wu et al. 2016, eq. 14): 0 and 0 rank as before they existed
    coverage_penalty: float = 0.0


@dataclass(frozen=True)
class VocabConfig:
    """`vocab:` of params.yaml: the shortlists (§4.1), or subword pieces (an ablation)."""

    kind: str
    src_size: int
    tgt_size: int


@dataclass(frozen=True)
class ScoreConfig:
    """`score:` of params.yaml: Figure 2's length buckets and its bootstrap intervals."""

    length_buckets: list[int]
    bootstrap_samples: int


# the train.* keys a model of `models` may set for itself
MODEL_TRAIN_KEYS = ("max_updates", "patience", "precision", "coverage_loss")


def train_config(config: dict, name: str) -> TrainConfig:
    """`train:` with the model's own `max_updates`, `patience`, `precision` and `coverage_loss` (MODEL_TRAIN_KEYS),
    and the output limit of `decode:`, which validation decodes with."""
    entry = config["models"][name]
    return typed(TrainConfig, {**config["train"], **{k: entry[k] for k in MODEL_TRAIN_KEYS if k in entry},
                               "max_len_a": config["decode"]["max_len_a"], "max_len_b": config["decode"]["max_len_b"]})


def typed(cls, values: dict):
    """A config dataclass from a validated section (the schema allows no other keys)."""
    return cls(**{f.name: values[f.name] for f in fields(cls)})
