"""A model that continues another (`models.<name>.continues`, the paper's RNNsearch-50*): its training starts from
the parent's final state and trains only the updates after it, ending where one uninterrupted training of the
child's budget ends; a retrained parent trains it again; the workflow orders and reruns the two."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from rnnsearch import config as cfg
from rnnsearch.textio import InputError
from rnnsearch.training.train import TrainFiles, train

from .conftest import REPO, built_once, dag_copy, repo_copy, run
from .test_resume import data  # noqa: F401  (the session's tokenized synthetic corpus)

PARENT, CHILD, N, TOTAL = "rnnsearch-50", "rnnsearch-50-star", 60, 100


def _params(data: Path, **parent_entry) -> dict:
    params = yaml.safe_load((data / "params.yaml").read_text())
    params["train"].update(lr_decay=0, keep_checkpoints=10)  # continuing needs a constant rate
    params["models"][PARENT] = {**params["models"][PARENT], "max_updates": N, **parent_entry}
    params["models"][CHILD] = {"arch": "rnnsearch", "train_max_len": 50, "continues": PARENT, "max_updates": TOTAL}
    return params


def _train(data: Path, params: dict, name: str, out: Path, continues: tuple[str, str] | None = None) -> dict:
    files = TrainFiles(*(str(data / f) for f in ("train.en", "train.fr", "dev.en", "dev.fr", "vocab.en.tsv",
                                                 "vocab.fr.tsv")))
    return train(name, cfg.model_config(params, name), cfg.train_config(params, name), params["seed"], files, str(out),
                 continues=continues)


@pytest.fixture(scope="module")
def runs(data: Path, tmp_path_factory) -> Path:  # noqa: F811
    """The parent (N updates), the child continuing it (to TOTAL) and one uninterrupted training of TOTAL."""
    def build(d: Path) -> None:
        params = _params(data)
        _train(data, params, PARENT, d / "parent")
        _train(data, params, CHILD, d / "child", (PARENT, str(d / "parent" / "checkpoint.pt")))
        whole = {**params, "models": {**params["models"], PARENT: {**params["models"][PARENT], "max_updates": TOTAL}}}
        _train(data, whole, PARENT, d / "whole")
    return built_once(tmp_path_factory, "continue_runs", build)


def _state(path: Path) -> dict:
    return torch.load(path, weights_only=True)


def test_the_child_starts_from_the_parents_final_state_and_trains_only_the_rest(runs: Path):
    parent, child = _state(runs / "parent" / "checkpoint.pt"), _state(runs / "child" / f"checkpoint-{N:09d}.pt")
    assert child["update"] == parent["update"] == N
    for part in ("model", "optimizer", "data_position"):
        assert str(child[part]) == str(parent[part]), part  # tensors printed in full at these sizes
    assert all(torch.equal(child["model"][k], parent["model"][k]) for k in parent["model"])
    stats = json.loads((runs / "child" / "train_stats.json").read_text())
    assert stats["updates"] == TOTAL  # Table 2 counts from the start
    assert [(r["start"], r["end"]) for r in stats["runs"]] == [(0, N), (N, TOTAL)]  # the parent's run, then its own
    origin = stats["continued_from"]
    assert (origin["model"], origin["update"], origin["checkpoint"]) == (PARENT, N, str(runs / "parent" / "checkpoint.pt"))
    curve = (runs / "child" / "validation.tsv").read_text().splitlines()
    assert [int(r.split("\t")[0]) for r in curve[1:]] == [25, 50, 60, 75, 100]  # the parent's rows, then its own


def test_the_continued_training_ends_as_one_uninterrupted_training(runs: Path):
    """Constant step sizes and the same seed: N updates, then the rest from the saved state, give exactly the
    weights and optimizer state of TOTAL updates in one go."""
    child, whole = _state(runs / "child" / "checkpoint.pt"), _state(runs / "whole" / "checkpoint.pt")
    assert child["update"] == whole["update"] == TOTAL
    assert all(torch.equal(child["model"][k], whole["model"][k]) for k in whole["model"])
    assert str(child["optimizer"]["state"]) == str(whole["optimizer"]["state"])


def test_a_retrained_parent_trains_the_child_again_and_keeps_the_old_one(data: Path, runs: Path, tmp_path: Path,  # noqa: F811
                                                                         caplog):
    for name in ("parent", "child"):
        shutil.copytree(runs / name, tmp_path / name)
    params = _params(data, max_updates=50)  # a lower budget: the parent is trained again from scratch
    _train(data, params, PARENT, tmp_path / "parent")
    with caplog.at_level("WARNING", logger="rnnsearch.train"):
        stats = _train(data, params, CHILD, tmp_path / "child", (PARENT, str(tmp_path / "parent" / "checkpoint.pt")))
    assert "begun from" in caplog.text and "moved to" in caplog.text
    assert stats["continued_from"]["update"] == 50 and [r["end"] for r in stats["runs"]] == [50, TOTAL]
    (aside,) = (tmp_path / "child").glob("replaced-*")
    assert (aside / "model.pt").read_bytes() == (runs / "child" / "model.pt").read_bytes()
    whole = _state(runs / "whole" / "checkpoint.pt")["model"]
    again = _state(tmp_path / "child" / "checkpoint.pt")["model"]
    assert all(torch.equal(again[k], whole[k]) for k in whole)  # 50 + 50 updates: the same as 100 in one go


def test_a_parent_unfinished_or_of_another_network_is_refused(data: Path, runs: Path, tmp_path: Path):  # noqa: F811
    params = _params(data)
    unfinished = _state(runs / "parent" / "checkpoint.pt")
    unfinished["progress"]["finished"] = False
    torch.save(unfinished, tmp_path / "unfinished.pt")
    with pytest.raises(InputError, match=rf"unfinished.pt: {PARENT}'s training has not finished \(update {N}\)"):
        _train(data, params, CHILD, tmp_path / "a", (PARENT, str(tmp_path / "unfinished.pt")))
    other = {**params, "train": {**params["train"], "batch_size": 20}}
    with pytest.raises(InputError, match=rf"cannot continue this state of {PARENT}: .*train.batch_size: 40 in the "
                                         r"checkpoint, 20 now"):
        _train(data, other, CHILD, tmp_path / "b", (PARENT, str(runs / "parent" / "checkpoint.pt")))
    with pytest.raises(InputError, match=rf"missing.pt: not found; the training of {PARENT} must finish"):
        _train(data, params, CHILD, tmp_path / "c", (PARENT, str(tmp_path / "missing.pt")))
    assert not (tmp_path / "a" / "checkpoint.pt").exists() and not (tmp_path / "b" / "checkpoint.pt").exists()


def test_a_continued_model_may_add_the_coverage_loss(data: Path, runs: Path, tmp_path: Path):  # noqa: F811
    """See et al. (2017)'s second phase: the child of a finished training (λ = 0) trains its own updates with the
    coverage loss (train.coverage_loss in its config and its checkpoints), starting from the parent's exact state and
    ending elsewhere than the training without it; its own checkpoint then resumes only under its own λ."""
    params = _params(data)
    params["models"][CHILD]["coverage_loss"] = 1.0
    stats = _train(data, params, CHILD, tmp_path / "child", (PARENT, str(runs / "parent" / "checkpoint.pt")))
    assert stats["updates"] == TOTAL and stats["continued_from"]["update"] == N
    first, last = _state(tmp_path / "child" / f"checkpoint-{N:09d}.pt"), _state(tmp_path / "child" / "checkpoint.pt")
    parent, plain = _state(runs / "parent" / "checkpoint.pt"), _state(runs / "child" / "checkpoint.pt")
    assert all(torch.equal(first["model"][k], parent["model"][k]) for k in parent["model"])
    assert last["config"]["train"]["coverage_loss"] == 1.0 and parent["config"]["train"]["coverage_loss"] == 0.0
    assert not all(torch.equal(last["model"][k], plain["model"][k]) for k in plain["model"])
    params["models"][CHILD]["coverage_loss"] = 0.5
    stats = _train(data, params, CHILD, tmp_path / "child", (PARENT, str(runs / "parent" / "checkpoint.pt")))
    assert len(list((tmp_path / "child").glob("replaced-*"))) == 1  # λ 1.0's finished training moved aside


@pytest.mark.parametrize("entry,expected", [
    ({"continues": "rnnsearch-80"}, "'models.rnnsearch-50-star.continues': 'rnnsearch-80' is not another key"),
    ({"continues": "rnnencdec-50"}, "must be the same network"),
    ({"train_max_len": 30}, "must train on rnnsearch-50's text (train_max_len 50, got 30)"),
    ({"max_updates": 12}, "max_updates 12 leaves nothing to train after rnnsearch-50's 12"),
])
def test_a_continuation_that_cannot_be_is_a_config_error(tmp_path: Path, entry: dict, expected: str):
    overlay = {"train": {"lr_decay": 0}, "models": {CHILD: {"arch": "rnnsearch", "train_max_len": 50,
                                                           "continues": PARENT, "max_updates": 40, **entry}}}
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    with pytest.raises(cfg.ConfigError) as e:
        cfg.load_params([REPO / "params.yaml", REPO / "tests" / "configs" / "tiny.yaml", tmp_path / "overlay.yaml"])
    assert expected in str(e.value)
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump({"models": {CHILD: overlay["models"][CHILD]}}))
    with pytest.raises(cfg.ConfigError, match=r"'train.lr_decay': 0.5: a continued model's step sizes"):
        cfg.load_params([REPO / "params.yaml", tmp_path / "overlay.yaml"])


def test_a_cycle_of_continuations_is_a_config_error(tmp_path: Path):
    models = {"a": {"arch": "rnnsearch", "train_max_len": 50, "continues": "b", "max_updates": 40},
              "b": {"arch": "rnnsearch", "train_max_len": 50, "continues": "a", "max_updates": 50}}
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump({"train": {"lr_decay": 0}, "models": models}))
    with pytest.raises(cfg.ConfigError, match=r"'models.a.continues': a cycle \(a -> b -> a\)"):
        cfg.load_params([REPO / "params.yaml", tmp_path / "overlay.yaml"])


def _trains(plan: str) -> list[str]:
    """The training jobs of a dry run, in the order Snakemake plans them (model/replicate)."""
    return [block.split("model=")[1].split(",")[0] + "/" + block.split("replicate=")[1].split()[0]
            for block in plan.split("rule train:")[1:]]


def test_paper_yaml_trains_rnnsearch_50_star_after_rnnsearch_50_from_its_checkpoint(tmp_path: Path):
    repo = repo_copy(tmp_path)
    plan = run(["snakemake", "-n", "-p", "--configfile", "workflow/configs/paper.yaml"], repo).stdout
    order = _trains(plan)
    assert order.index("rnnsearch-50-star/1") > order.index("rnnsearch-50/1"), order
    star = plan.split("rule train:")[1:][order.index("rnnsearch-50-star/1")]
    assert "results/models/rnnsearch-50/replicate1/train_stats.json" in star.split("output:")[0]
    assert "--continue-from results/models/rnnsearch-50/replicate1/checkpoint.pt" in star


@pytest.mark.slow
def test_the_workflow_reruns_the_child_when_the_parents_budget_changes(tiny_dag: Path, tmp_path: Path):
    """On the tiny DAG's data: with a constant rate, the parent trains again and the child's job trains only the
    updates after its parent's; after a change of the parent's budget `snakemake -n` plans both trainings again."""
    overlay = {"train": {"lr_decay": 0}, cfg.REMOVE: ["models.rnnencdec-30", "models.rnnsearch-30",
                                                       "models.rnnencdec-50"],
               "models": {CHILD: {"arch": "rnnsearch", "train_max_len": 50, "continues": PARENT, "max_updates": 20}}}
    repo = dag_copy(tiny_dag, tmp_path / "ws", overlay)
    targets = [f"results/models/{m}/replicate1/train_stats.json" for m in (PARENT, CHILD)]
    planned = run(["snakemake", "-n", *targets], repo).stdout
    assert sorted(_trains(planned)) == sorted([f"{PARENT}/1", f"{CHILD}/1"]), planned
    assert "rule tokenize" not in planned, planned  # the data are the tiny DAG's
    run(["snakemake", "--cores", "2", *targets], repo)
    stats = json.loads((repo / targets[1]).read_text())
    assert [(r["start"], r["end"]) for r in stats["runs"]] == [(0, 12), (12, 20)]
    log = (repo / "results" / "logs" / "train" / CHILD / "replicate1.log").read_text()
    assert "continuing rnnsearch-50 from update 12" in log and "update 4/20" not in log
    assert _trains(run(["snakemake", "-n", *targets], repo).stdout) == []
    plan = run(["snakemake", "-n", *targets, "--config", "models={rnnsearch-50: {max_updates: 16}}"], repo).stdout
    assert sorted(_trains(plan)) == sorted([f"{PARENT}/1", f"{CHILD}/1"])
