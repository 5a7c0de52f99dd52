"""data.source: multi30k: the task-1 files fetched from a loopback HTTP server that serves them gzipped (built here
from the real copy, RNNSEARCH_SHARED_DATA), checked against the recorded checksums, through the stage and through Snakemake."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import yaml

from rnnsearch import config as cfg
from rnnsearch.data.corpus import multi30k
from rnnsearch.data.corpus.download import DownloadError
from rnnsearch.textio import InputError

from .conftest import REPO, repo_copy, run
from .test_download import Server


@pytest.fixture
def mirror(shared_data):
    """A loopback server with every recorded Multi30k file as <name>.gz, gzipped here from the real text."""
    server = Server()
    for name in multi30k.TEXT_SHA256:
        server.files[f"/task1/raw/{name}.gz"] = gzip.compress((shared_data / "multi30k_enfr" / name).read_bytes())
    yield server
    server.httpd.shutdown()


def test_fetch_checks_the_decompressed_text(mirror, shared_data, tmp_path):
    out = multi30k.fetch("val.fr", tmp_path / "val.fr", mirror.url + "/task1/raw")
    assert out.read_bytes() == (shared_data / "multi30k_enfr" / "val.fr").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["val.fr"]  # the .gz is gone


def test_a_file_that_is_not_the_recorded_one_is_refused_and_deleted(tmp_path):
    server = Server()
    try:
        server.files["/raw/val.en.gz"] = gzip.compress(b"Two dogs play in the snow .\n")
        with pytest.raises(DownloadError, match=r"/raw/val.en.gz: .*sha256: expected 1f2a23d9\w+, got \w{64}.*deleted"):
            multi30k.fetch("val.en", tmp_path / "val.en", server.url + "/raw")
        assert list(tmp_path.iterdir()) == []
    finally:
        server.httpd.shutdown()


def test_only_recorded_files_and_language_pairs(tmp_path):
    with pytest.raises(InputError, match=r"train.de: not a Multi30k task-1 file with a recorded checksum"):
        multi30k.fetch("train.de", tmp_path / "train.de")
    config = cfg.merge(cfg.load_params([REPO / "params.yaml"]), {"data": {"source": "multi30k", "tgt": "de"}})
    with pytest.raises(cfg.ConfigError, match=r"data.source multi30k has checksums recorded for en and fr only, got en-de"):
        cfg.validate(config)


@pytest.mark.slow
def test_the_workflow_downloads_and_prepares_multi30k(mirror, tmp_path):
    """Snakemake from the download rule to the corpus: 6 files (train, val, test_2017_flickr as `test`), the
    pairs counted in corpus.json."""
    ws = repo_copy(tmp_path, {"data": {"source": "multi30k", "multi30k": {"url": mirror.url + "/task1/raw",
                                                                          "test": "test_2017_flickr"}},
                              "aer": {"gold": "none"}})
    p = run(["snakemake", "--cores", "2", "results/data/raw/corpus.json"], ws, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    stats = json.loads((ws / "results/data/raw/corpus.json").read_text())
    assert {split: stats[split]["pairs"] for split in ("train", "dev", "test")} == {"train": 29000, "dev": 1014,
                                                                                     "test": 1000}
    assert len(mirror.requests) == 6
    raw = (ws / "results/data/raw/test.fr").read_text().splitlines()
    assert raw[0] == (mirror_text := gzip.decompress(mirror.files["/task1/raw/test_2017_flickr.fr.gz"]).decode()
                      ).splitlines()[0].strip() and len(raw) == len(mirror_text.splitlines())
    assert "sha256" in (ws / "results/logs/download/multi30k/train.en.log").read_text()


@pytest.mark.slow
def test_the_preset_runs_offline_on_the_local_copy(shared_data, tmp_path):
    """README's offline command (the preset, then workflow/configs/local.yaml) through the whole DAG, with a
    reduced budget: the training text in one shard, 20 updates of small models, beam 2, outputs of at most
    0.5 |x| + 3 words (an untrained model writes to the length limit: 1.5 |x| + 10 made decoding most of the
    test's time), one thread a job (the preset's two would spin against the other pytest worker)."""
    ws = repo_copy(tmp_path / "ws")
    (ws / "data").mkdir()
    (ws / "data" / "multi30k_enfr").symlink_to(shared_data / "multi30k_enfr")  # where local.yaml reads the text
    (ws / "ci.yaml").write_text(yaml.safe_dump({
        "model": {"m": 32, "n": 32, "n_align": 32, "l": 16},
        "models": {"rnnencdec-50": {"max_updates": 20}, "rnnsearch-50": {"max_updates": 20}},
        "train": {"validate_every": 20, "checkpoint_every": 20, "log_every": 10, "threads": 1},
        "decode": {"beam": 2, "batch_size": 100, "threads": 1, "max_len_a": 0.5, "max_len_b": 3},
        "score": {"bootstrap_samples": 50}, "prepare": {"shards": 1}}))
    p = run(["snakemake", "all", "--cores", "2", "--configfile", "workflow/configs/multi30k.yaml",
             "workflow/configs/local.yaml", "ci.yaml"], ws, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    corpus = json.loads((ws / "results/data/raw/corpus.json").read_text())
    assert corpus["train"]["pairs"] == 29000 and corpus["test"]["source"].endswith("test_2016_flickr.en")
    table1 = (ws / "results/tables/table1.csv").read_text()
    assert "rnnsearch-50" in table1 and "rnnsearch-30" not in table1  # the preset trains the two -50 models
    extra = json.loads((ws / "results/tables/extra_tests.json").read_text())["scores"]
    assert set(extra["rnnsearch-50"]) == {"test_2017_flickr", "test_2018_flickr"}
    report = (ws / "results/report.md").read_text()
    assert "## Sample translations" in report and "- Reference: " in report
