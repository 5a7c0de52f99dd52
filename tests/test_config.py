"""params.yaml validation: unknown, mistyped and missing keys fail at once with the key named."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from rnnsearch import config as cfg

from .conftest import REPO


def params() -> dict:
    return cfg.load_yaml(REPO / "params.yaml")


def problems(config: dict) -> str:
    with pytest.raises(cfg.ConfigError) as e:
        cfg.validate(config)
    return str(e.value)


def test_shipped_configs_are_valid():
    cfg.load_params([REPO / "params.yaml"])
    paper = cfg.load_params([REPO / "params.yaml", REPO / "workflow" / "configs" / "paper.yaml"])
    assert paper["model"] == {"m": 620, "n": 1000, "n_align": 1000, "l": 500}
    assert paper["vocab"] == {"kind": "shortlist", "src_size": 30000, "tgt_size": 30000}
    assert paper["data"]["source"] == "wmt14" and paper["data"]["wmt14"]["selection"] == "lium"
    assert paper["train"]["optimizer"] == "adadelta" and paper["train"]["batch_size"] == 80
    m30k = cfg.load_params([REPO / "params.yaml", REPO / "workflow" / "configs" / "multi30k.yaml"])
    assert list(m30k["models"]) == ["rnnencdec-50", "rnnsearch-50"] and m30k["data"]["source"] == "multi30k"
    offline = cfg.load_params([REPO / "params.yaml", REPO / "workflow" / "configs" / "multi30k.yaml",
                               REPO / "workflow" / "configs" / "local.yaml"])
    assert offline["data"]["source"] == "local" and offline["model"] == m30k["model"]
    assert offline["extra_tests"]["test_2018_flickr"] == "data/multi30k_enfr/test_2018_flickr"


def test_unknown_key_is_named_with_its_path():
    c = params()
    c["model"]["hiden"] = 5
    c["models"]["rnnsearch-50"]["atention"] = "yes"
    msg = problems(c)
    assert "unknown key 'model.hiden'" in msg and "allowed here: l, m, n, n_align" in msg
    assert "unknown key 'models.rnnsearch-50.atention'" in msg


def test_wrong_type_and_missing_key():
    c = params()
    c["train"]["lr"] = "fast"
    del c["decode"]["beam"]
    msg = problems(c)
    assert "'train.lr': expected number, got 'fast'" in msg
    assert "missing required key 'decode.beam'" in msg


def test_enum_and_cross_checks():
    c = params()
    c["models"]["rnnsearch-50"]["arch"] = "transformer"
    assert "'models.rnnsearch-50.arch': expected one of rnnsearch, rnnencdec, luong" in problems(c)
    c = params()
    c["figures"]["alignment_model"] = "rnnencdec-50"
    assert "has no attention" in problems(c)
    c = params()
    c["models"]["rnnsearch-50"]["attention"] = "none"
    assert "'figures.alignment_model': 'rnnsearch-50' has no attention" in problems(c)


def test_ablation_switches_override_the_preset():
    c = params()
    c["models"]["rnnsearch-50"].update(cell="lstm", attention="multiplicative", dropout=0.1)
    cfg.validate(c)
    resolved = cfg.model_config(c, "rnnsearch-50")
    assert resolved == {"arch": "rnnsearch", **c["model"], "cell": "lstm", "bidirectional": True,
                        "attention": "multiplicative", "combined_output": False, "input_feeding": False, "dropout": 0.1}
    assert cfg.model_config(c, "rnnencdec-50")["attention"] == "none"  # other models keep their preset
    c["models"]["rnnsearch-30"]["attention"] = "dot"
    c["models"]["rnnencdec-30"]["input_feeding"] = True
    c["models"]["rnnencdec-50"]["cell"] = "transformer"
    msg = problems(c)
    assert "'models.rnnencdec-50.cell': expected one of gru, lstm, got 'transformer'" in msg
    c["models"]["rnnencdec-50"]["cell"] = "gru"
    msg = problems(c)
    assert "'models.rnnsearch-30': attention 'dot'" in msg and "bidirectional: false" in msg
    assert "'models.rnnencdec-30': input_feeding" in msg and "combined_output: true" in msg


def test_overlays_merge_key_by_key(tmp_path):
    overlay = tmp_path / "o.yaml"
    overlay.write_text("model: {n: 7}\nmodels: {rnnsearch-50: {max_updates: 3}}\n")
    c = cfg.load_params([REPO / "params.yaml", overlay])
    assert c["model"]["n"] == 7 and c["model"]["m"] == params()["model"]["m"]
    assert cfg.model_config(c, "rnnsearch-50")["n"] == 7
    assert cfg.train_config(c, "rnnsearch-50").max_updates == 3
    assert cfg.train_config(c, "rnnsearch-30").max_updates == params()["train"]["max_updates"]
    overlay.write_text("models: {rnnsearch-30: null, rnnencdec-30: null}\n")  # null removes a key
    assert list(cfg.load_params([REPO / "params.yaml", overlay])["models"]) == ["rnnencdec-50", "rnnsearch-50"]


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: 1\nmodel: {m: 3\n")
    with pytest.raises(cfg.ConfigError, match=r"bad.yaml:\d+: not valid YAML"):
        cfg.load_params([bad])


def test_cli_and_snakemake_fail_at_start_naming_the_key(tmp_path):
    overlay = tmp_path / "typo.yaml"
    overlay.write_text(yaml.safe_dump({"train": {"max_update": 5}}))
    cli = subprocess.run([sys.executable, "-m", "rnnsearch.cli", "check-params", "--params", str(REPO / "params.yaml"),
                          "--params", str(overlay)], capture_output=True, text=True)
    assert cli.returncode == 2 and "unknown key 'train.max_update'" in cli.stderr and "Traceback" not in cli.stderr
    smk = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", str(overlay)], cwd=REPO,
                         capture_output=True, text=True)
    assert smk.returncode != 0 and "unknown key 'train.max_update'" in smk.stdout + smk.stderr
