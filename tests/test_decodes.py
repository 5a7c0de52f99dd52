"""An entry of `models` that decodes another model's checkpoints with its own `decode` settings (`decodes`, a
decode-only ablation such as GNMT's penalties on the paper's RNNsearch-50): the translate stage ranks with them,
files the translations under the entry and refuses another model's checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .forks import rnnsearch
from .test_resume import data as data  # noqa: F401 (the module's fixtures)
from .test_resume import reference as reference  # noqa: F401

GNMT = {"length_norm": False, "length_penalty": 0.6, "coverage_penalty": 5.0}


def _translate(data: Path, checkpoint: Path, params: dict, out: Path, *flags: str):
    (out.parent / f"{out.name}.yaml").write_text(yaml.safe_dump(params))
    return rnnsearch("translate", "--params", str(out.parent / f"{out.name}.yaml"), "--checkpoint", str(checkpoint),
                     "--src", str(data / "dev.en"), "--ref", str(data / "dev.fr"), "--src-vocab",
                     str(data / "vocab.en.tsv"), "--tgt-vocab", str(data / "vocab.fr.tsv"), "--out-dir", str(out),
                     *flags)


def test_an_entry_that_decodes_a_model_ranks_with_its_own_settings_and_files_under_its_name(
        data: Path, reference: Path, tmp_path: Path):  # noqa: F811
    """The entry's `decode` over params.yaml's gives what the same settings in `decode:` give; the model's own
    translations (params.yaml's ranking, per word) differ from them; decode_stats.json names both models."""
    params = yaml.safe_load((data / "params.yaml").read_text())
    params["models"]["rnnsearch-50-gnmt"] = {"arch": "rnnsearch", "train_max_len": 50, "decodes": "rnnsearch-50",
                                             "decode": GNMT}
    own = _translate(data, reference, params, tmp_path / "own", "--model", "rnnsearch-50-gnmt")
    plain = _translate(data, reference, params, tmp_path / "plain", "--model", "rnnsearch-50")
    params["decode"].update(GNMT)  # every model decoded so: those without attention removed
    params["models"] = {"rnnsearch-50": params["models"]["rnnsearch-50"]}
    params["peer"]["model"] = params["figures"]["alignment_model"] = "rnnsearch-50"
    whole = _translate(data, reference, params, tmp_path / "whole")
    assert own.returncode == plain.returncode == whole.returncode == 0, own.stderr + plain.stderr + whole.stderr
    hyps = {k: (tmp_path / k / "test.hyp.tok").read_text() for k in ("own", "plain", "whole")}
    assert hyps["own"] == hyps["whole"] != hyps["plain"]
    stats = {k: json.loads((tmp_path / k / "decode_stats.json").read_text()) for k in ("own", "plain", "whole")}
    assert stats["own"]["model"] == "rnnsearch-50-gnmt" and stats["own"]["decodes"] == "rnnsearch-50"
    assert {k: stats["own"][k] for k in GNMT} == GNMT and "length_penalty" not in stats["plain"]
    assert stats["plain"]["model"] == stats["whole"]["model"] == "rnnsearch-50" and "decodes" not in stats["whole"]


def test_an_entry_refuses_the_checkpoint_of_a_model_it_does_not_decode(data: Path, reference: Path,  # noqa: F811
                                                                        tmp_path: Path):
    params = yaml.safe_load((data / "params.yaml").read_text())
    other = next(m for m, e in params["models"].items() if m != "rnnsearch-50" and e["arch"] == "rnnsearch")
    entry = {**params["models"][other], "decodes": other, "decode": GNMT}
    params["models"]["gnmt"] = {k: v for k, v in entry.items() if k not in ("max_updates", "patience", "precision")}
    proc = _translate(data, reference, params, tmp_path / "out", "--model", "gnmt")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"{reference}: a checkpoint of rnnsearch-50, but --model gnmt decodes {other}'s" in proc.stderr
    assert not (tmp_path / "out" / "test.hyp").exists()
