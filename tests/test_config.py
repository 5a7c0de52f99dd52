"""params.yaml validation: unknown, mistyped and missing keys fail at once with the key named."""

from __future__ import annotations

import copy
import os
import re
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


def test_checking_a_config_as_the_workflow_does_imports_no_torch():
    """Snakemake parses the workflow (common.smk's imports, each model's config checked and resolved) at every
    start and, under Slurm, in every job: PyTorch's import (1.5 s or more) must not be part of it."""
    code = ("import sys\n"
            "from rnnsearch import commands, config as cfg\n"
            "from rnnsearch.data import binarized\n"
            f"c = cfg.load_params([{str(REPO / 'params.yaml')!r}, "
            f"{str(REPO / 'workflow' / 'configs' / 'paper.yaml')!r}])\n"
            "cfg.validate(c)\n"
            "[(cfg.model_config(c, m), cfg.train_config(c, m)) for m in c['models']]\n"
            "commands.stage_code('train')\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False", "checking a config imported torch"


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
    overlay.write_text("remove: [models.rnnsearch-30, models.rnnencdec-30]\n")  # the documented spelling
    assert list(cfg.load_params([REPO / "params.yaml", overlay])["models"]) == ["rnnencdec-50", "rnnsearch-50"]


def test_removing_an_entry_has_its_own_spelling_and_null_is_a_value(tmp_path):
    overlay = tmp_path / "o.yaml"
    overlay.write_text("models: {rnnsearch-30: null}\n")  # null is a value, not a removal: the message says how
    with pytest.raises(cfg.ConfigError, match=r"'models.rnnsearch-30': expected object, got None \(to drop it, name "
                                              r"it in an overlay's list `remove: \[models.rnnsearch-30\]`\)"):
        cfg.load_params([REPO / "params.yaml", overlay])
    for text, message in [("remove: [models.rnnsearch-99]\n", r"'models.rnnsearch-99' is not in the configuration "
                                                               r"\(models: rnnencdec-30, rnnsearch-30"),
                          ("remove: [train.lr]\n", r"'train.lr' is not an entry of models or extra_tests"),
                          ("remove: models.rnnsearch-30\n", r"expected a list of entries")]:
        overlay.write_text(text)
        with pytest.raises(cfg.ConfigError, match=r"o.yaml: 'remove': " + message):
            cfg.load_params([REPO / "params.yaml", overlay])
    overlay.write_text("extra_tests: {again: results/data/raw/test}\n")
    later = tmp_path / "later.yaml"
    later.write_text("remove: [extra_tests.again]\nmodels: {rnnsearch-30: {n: 8}}\n")
    merged = cfg.load_params([REPO / "params.yaml", overlay, later])
    assert merged["extra_tests"] == {} and merged["models"]["rnnsearch-30"] == {"arch": "rnnsearch",
                                                                                 "train_max_len": 30, "n": 8}


@pytest.mark.slow
def test_a_copy_of_params_yaml_is_an_overlay(tmp_path):
    """A verbatim copy of params.yaml with one value changed (nulls and all): check-params prints params.yaml
    with that value, and Snakemake plans with it, also with the base file listed before a preset."""
    copy = tmp_path / "myexp.yaml"
    text = (REPO / "params.yaml").read_text()
    assert "  beam: 12 " in text and ": null" in text
    copy.write_text(text.replace("  beam: 12 ", "  beam: 5  ", 1))
    cli = subprocess.run([sys.executable, "-m", "rnnsearch.cli", "check-params", "--params", str(REPO / "params.yaml"),
                          "--params", str(copy)], capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    expected = params()
    expected["decode"]["beam"] = 5
    assert yaml.safe_load(cli.stdout) == expected
    assert dict(cfg.stage_params(yaml.safe_load(cli.stdout), "translate"))["decode"]["beam"] == 5
    for files in ([str(copy)], ["params.yaml", "workflow/configs/multi30k.yaml"]):
        smk = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--forceall", "--configfile", *files],
                             cwd=REPO, capture_output=True, text=True)
        assert smk.returncode == 0, smk.stdout[-2000:] + smk.stderr[-2000:]
        assert "This was a dry-run" in smk.stdout
    assert "rnnsearch-30" not in smk.stdout and "download" in smk.stdout  # multi30k.yaml's remove: and its source


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


def _floats(value, path=()):
    """The dotted key of every float in a config."""
    if isinstance(value, dict):
        return [k for key, v in value.items() for k in _floats(v, path + (key,))]
    return [".".join(map(str, path))] if isinstance(value, float) else []


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_every_float_setting_rejects_nan_and_infinity_naming_the_key(bad):
    """NaN passes every bound of a JSON schema (NaN > 0 and NaN < 1 are both false), inf every lower one: each float
    of params.yaml and of paper.yaml's models, set to one in turn, is an error naming the key and what it allows."""
    c = cfg.load_params([REPO / "params.yaml", REPO / "workflow/configs/paper.yaml"])
    keys = _floats(c)
    assert {"train.lr", "train.rho", "train.eps", "train.clip_norm", "decode.max_len_a"} <= set(keys), keys
    for key in keys:
        changed = params_with(c, key, bad)
        msg = problems(changed)
        assert f"'{key}': expected a finite number" in msg and f"got {bad}" in msg, (key, msg)
        assert msg.count(f"'{key}'") == 1, msg  # said once, not again by the schema's own bound
    assert "'train.lr': expected a finite number > 0, got" in problems(params_with(c, "train.lr", bad))
    assert "'train.rho': expected a finite number > 0 and < 1, got" in problems(params_with(c, "train.rho", bad))


def params_with(config: dict, key: str, value) -> dict:
    changed = copy.deepcopy(config)
    *parents, last = key.split(".")
    node = changed
    for p in parents:
        node = node[p]
    node[last] = value
    return changed


def test_nan_stops_check_params_snakemake_and_dvc_overrides_at_the_start(tmp_path):
    """`train.lr: .nan` in an overlay, in --config and as `dvc exp run -S train.lr=nan` writes it into params.yaml:
    check-params and `snakemake -n` stop with exit 2 / an error naming train.lr, before any job."""
    from dvc.utils.hydra import apply_overrides

    overlay = tmp_path / "nan.yaml"
    overlay.write_text("train:\n  lr: .nan\n")
    edited = tmp_path / "params.yaml"  # what `dvc exp run -S train.lr=nan` runs the stages on
    edited.write_text((REPO / "params.yaml").read_text())
    apply_overrides(str(edited), ["train.lr=nan"])
    for files in ([str(REPO / "params.yaml"), str(overlay)], [str(edited)]):
        cli = subprocess.run([sys.executable, "-m", "rnnsearch.cli", "check-params",
                              *(a for f in files for a in ("--params", f))], capture_output=True, text=True)
        assert cli.returncode == 2 and "'train.lr': expected a finite number > 0, got nan" in cli.stderr, cli.stderr
        assert "Traceback" not in cli.stderr
    for extra in (["--configfile", str(overlay)], ["--config", "train={lr: .nan}"]):
        smk = subprocess.run([sys.executable, "-m", "snakemake", "-n", *extra], cwd=REPO, capture_output=True,
                             text=True)
        assert smk.returncode != 0 and "'train.lr': expected a finite number > 0, got nan" in smk.stdout + smk.stderr


@pytest.mark.parametrize("pair, message", [
    (("de", "fr"), "'data.src', 'data.tgt': data.source synthetic generates English-like to French-like text, en-fr "
                   "only, got de-fr (data.source local takes your own languages)"),
    (("fr", "fr"), "'data.src', 'data.tgt': both are 'fr'; expected the source and the target language, two codes")])
def test_the_language_pair_is_checked_against_the_source(pair, message, tmp_path):
    """`data: {src: de}` with the embedded corpus passed check-params, then failed in the corpus job with
    Snakemake's "might be due to filesystem latency"."""
    overlay = tmp_path / "o.yaml"
    overlay.write_text(yaml.safe_dump({"data": {"src": pair[0], "tgt": pair[1]}}))
    with pytest.raises(cfg.ConfigError) as e:
        cfg.load_params([REPO / "params.yaml", overlay])
    assert message in str(e.value) and str(e.value).count("'data.src'") == 1


def test_check_params_reads_the_files_rnnsearch_params_names(tmp_path, monkeypatch):
    """Without --params, check-params prints what the workflow's stages read: $RNNSEARCH_PARAMS (it printed
    params.yaml alone)."""
    monkeypatch.setenv("RNNSEARCH_PARAMS", os.pathsep.join([str(REPO / "params.yaml"),
                                                            str(REPO / "workflow" / "configs" / "paper.yaml")]))
    assert yaml.safe_load(cfg.dump(None))["model"]["n"] == 1000
    assert yaml.safe_load(cfg.dump([str(REPO / "params.yaml")]))["model"]["n"] == 96  # --params first
    monkeypatch.delenv("RNNSEARCH_PARAMS")
    monkeypatch.chdir(REPO)
    assert yaml.safe_load(cfg.dump(None))["model"]["n"] == 96


def test_overlays_then_a_target_as_docs_cluster_md_writes_them():
    """docs/cluster.md's command with two overlays and a target (`--configfile A B -- target`): Snakemake plans the
    target's jobs under both overlays; the target is not read as a third config file."""
    doc = (REPO / "docs" / "cluster.md").read_text()
    assert "--configfile workflow/configs/paper.yaml gpus4.yaml -- results/models/rnnsearch-50/replicate1/model.pt" in doc
    smk = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", "tests/configs/tiny.yaml",
                          "workflow/configs/multi30k.yaml", "--", "results/models/rnnsearch-50/replicate1/model.pt"],
                         cwd=REPO, capture_output=True, text=True)
    out = smk.stdout + smk.stderr
    assert smk.returncode == 0 and "FileNotFoundError" not in out, out[-2000:]
    planned = set(re.findall(r"^rule (\w+):", out, re.M))
    assert {"download", "train"} <= planned and not planned & {"translate", "score", "tables"}, planned


def test_an_entry_that_decodes_another_model_is_checked_against_it():
    """`decodes`: another trained model, the same network and text, nothing a training would read; `decode:` only
    on such an entry (on a trained model its change would retrain it); its penalties checked where they can act."""
    c = params()
    gnmt = {"length_norm": False, "length_penalty": 0.2, "coverage_penalty": 0.2}
    c["models"]["gnmt"] = {"arch": "rnnsearch", "train_max_len": 50, "decodes": "rnnsearch-50", "decode": gnmt}
    cfg.validate(c)
    assert cfg.trained(c, "gnmt") == "rnnsearch-50" and cfg.trained(c, "rnnsearch-50") == "rnnsearch-50"
    assert cfg.decoding(c, "gnmt") == {**c["decode"], **gnmt} and cfg.decoding(c, "rnnsearch-30") == c["decode"]
    for change, expected in [
        ({"decodes": "rnnsearch-5"}, "'models.gnmt.decodes': 'rnnsearch-5' is not another trained model of 'models' "
                                     "(rnnencdec-30, rnnsearch-30, rnnencdec-50, rnnsearch-50)"),
        ({"decodes": "gnmt"}, "'models.gnmt.decodes': 'gnmt' is not another trained model"),
        ({"train_max_len": 30}, "'models.gnmt.decodes': gnmt must be rnnsearch-50's network (arch, sizes and switches) "
                                "and train_max_len"),
        ({"coverage": "neural"}, "gnmt must be rnnsearch-50's network"),
        ({"max_updates": 9, "patience": 1}, "'models.gnmt.decodes': gnmt trains nothing, so max_updates, patience "
                                            "cannot take effect; drop them"),
        ({"decode": {**gnmt, "length_norm": True}}, "'models.gnmt.decode.length_norm': GNMT's penalties replace"),
    ]:
        assert expected in problems(params_with(c, "models.gnmt", {**c["models"]["gnmt"], **change})), change
    assert "'models.gnmt.decode.coverage_penalty' sums each model's attention, and gnmt has none: drop it" in problems(
        params_with(c, "models.gnmt", {**c["models"]["gnmt"], "arch": "rnnencdec", "decodes": "rnnencdec-50"}))
    assert "'models.rnnsearch-30.decode': a model's own decode settings belong to an entry that decodes it" in problems(
        params_with(c, "models.rnnsearch-30", {**c["models"]["rnnsearch-30"], "decode": gnmt}))
    assert "'models.star.continues': gnmt trains nothing; continue rnnsearch-50" in problems(params_with(
        c, "models.star", {"arch": "rnnsearch", "train_max_len": 50, "continues": "gnmt", "max_updates": 99999}))


def test_a_coverage_loss_without_attention_is_an_error_naming_the_key():
    c = params()
    assert "'train.coverage_loss' sums the alignments α of rnnencdec-30, which has no attention: set it 0 for it " \
           "(models.rnnencdec-30.coverage_loss: 0)" in problems(params_with(c, "train.coverage_loss", 1.0))
    for name in ("rnnencdec-30", "rnnencdec-50"):
        c["models"][name]["coverage_loss"] = 0.0
    cfg.validate(params_with(c, "train.coverage_loss", 1.0))
    c["models"]["rnnsearch-30"]["coverage_loss"] = 2.0
    assert cfg.train_config(c, "rnnsearch-30").coverage_loss == 2.0 and cfg.train_config(c, "rnnsearch-50").coverage_loss == 0
    assert "'models.rnnencdec-50.coverage_loss' sums the alignments α of rnnencdec-50, which has no attention: set " \
           "it 0 there" in problems(params_with(c, "models.rnnencdec-50.coverage_loss", 0.5))


def test_gnmt_penalties_that_cannot_take_effect_are_errors_naming_the_key():
    """decode.length_penalty / coverage_penalty replace length_norm's ranking (which must then be off), need a beam,
    and the coverage penalty needs every model's attention; with those, the config is valid."""
    c = params()
    c["decode"].update(length_penalty=0.6)
    assert "'decode.length_norm': GNMT's penalties replace its division by the length; set it false" in problems(c)
    c["decode"].update(length_norm=False, beam=1)
    assert "'decode.beam': GNMT's penalties rank a beam's finished translations; beam 1 has one" in problems(c)
    c["decode"].update(beam=12, length_penalty=0.0, coverage_penalty=0.2)
    msg = problems(c)
    assert "'decode.coverage_penalty' sums each model's attention, and rnnencdec-30, rnnencdec-50 have none" in msg
    for name in ("rnnencdec-30", "rnnencdec-50"):
        del c["models"][name]
    c["peer"]["model"] = "rnnsearch-30" if c["peer"]["model"].startswith("rnnencdec") else c["peer"]["model"]
    cfg.validate(c)
