"""`data.source: wmt14`: WMT'14 English-French, downloaded, verified, extracted and assembled at full scale (§4.1).

`data.wmt14.selection` picks the training text:

* `lium` (the paper's data): the LIUM pre-selected bitexts, `bitexts.tgz` → `bitexts.selected/<corpus>.<lang>.gz`
  for the six corpora of `LIUM_CORPORA` (348M words; Moses-tokenized already, so the tokenize stage only undoes
  Moses' XML escapes), plus LIUM's `dev+test.tgz` (their tokenized newstest2012+2013 and newstest2014), whose line
  counts are checked against the official test sets and recorded.
* `full`: every WMT'14 en-fr corpus from statmt.org (`FULL_CORPORA`: Europarl v7, Common Crawl, UN, News
  Commentary v9 and the 10^9 fr-en Gigaword; about 850M words), raw text.

Both take dev = newstest2012 + newstest2013 from `dev.tgz` and test = newstest2014 from `test-full.tgz`, read from
the official SGM files (corpus/sgm.py), so that sacreBLEU is computed against the official raw references. The text
of each test set is checked against the sha256 recorded in `data.wmt14.records`, whatever the archive.

Each archive is one download job (resumed, retried, checked against what `data.wmt14.records` records: see
workflow/resources/wmt14.yaml for which archive has a sha256, only an MD5, only a size, or nothing published) and
one extraction job (only the members needed, through tarfile's `data` filter). The corpus stage streams the
training corpora through the cleaning rules of `data.source: local`, except that a pair with invalid UTF-8 is
dropped and counted (the crawled corpora have a few) rather than stopping a multi-hour job.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import shutil
from pathlib import Path

import yaml

from rnnsearch.data.corpus.download import Remote, download, extract_tar
from rnnsearch.data.corpus.local import clean_pairs, clean_stream, split_writers
from rnnsearch.data.corpus.sgm import read_sgm
from rnnsearch.data.corpus.source import URL as FOLDER_URL
from rnnsearch.data.corpus.source import Source, section
from rnnsearch.textio import InputError, count_lines, write_json_atomic

log = logging.getLogger("rnnsearch.corpus")

LANGS = ("en", "fr")
SELECTIONS = ("lium", "full")
LIUM_CORPORA = ("ep7_pc45", "nc9", "dev08_11", "crawl", "ccb2_pc30", "un2000_pc34")
FULL_CORPORA = {  # archive → (corpus, member prefix, suffix): <prefix>.<lang><suffix>
    "training-parallel-europarl-v7.tgz": ("europarl-v7", "training/europarl-v7.fr-en", ""),
    "training-parallel-commoncrawl.tgz": ("commoncrawl", "commoncrawl.fr-en", ""),
    "training-parallel-un.tgz": ("un", "un/undoc.2000.fr-en", ""),
    "training-parallel-nc-v9.tgz": ("news-commentary-v9", "training/news-commentary-v9.fr-en", ""),
    "training-giga-fren.tar": ("giga-fren", "giga-fren.release2.fixed", ".gz"),
}
DEV_SETS, TEST_SET = ("newstest2012", "newstest2013"), "newstest2014"
_SGM = {"dev.tgz": re.compile(r"dev/(newstest201[23])-(src|ref)\.(en|fr)\.sgm"),
        "test-full.tgz": re.compile(r"test-full/(newstest2014)-fren-(src|ref)\.(en|fr)\.sgm")}


def archives(selection: str) -> list[str]:
    """The files a selection downloads, in the order of the records file."""
    train = ["bitexts.tgz", "dev+test.tgz"] if selection == "lium" else list(FULL_CORPORA)
    return train + ["dev.tgz", "test-full.tgz"]


def members(name: str) -> list[str]:
    """The members extracted from `name` and required to be there (SGM archives: see `sgm_path`)."""
    if name == "bitexts.tgz":
        return [f"bitexts.selected/{c}.{lang}.gz" for c in LIUM_CORPORA for lang in LANGS]
    if name == "dev+test.tgz":
        return [f"dev/{s}.{lang}" for s in ("ntst1213", "ntst14") for lang in LANGS]
    if name in FULL_CORPORA:
        _, prefix, suffix = FULL_CORPORA[name]
        return [f"{prefix}.{lang}{suffix}" for lang in LANGS]
    return []


def load_records(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise InputError(f"'data.wmt14.records': {path} not found")
    records = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    missing = [n for sel in SELECTIONS for n in archives(sel) if n not in records.get("archives", {})]
    missing += [f"texts.{s}.{lang}" for s in (*DEV_SETS, TEST_SET) for lang in LANGS
                if f"{s}.{lang}" not in records.get("texts", {})]
    if missing:
        raise InputError(f"{path}: no record of {', '.join(missing)}")
    return records


def remote(name: str, records: dict, lium_url: str, statmt_url: str) -> Remote:
    r = records["archives"][name]
    base = {"lium": lium_url, "statmt": statmt_url}[r["base"]]
    return Remote(f"{base.rstrip('/')}/{r['url']}", size=r.get("size"), sha256=r.get("sha256"), md5=r.get("md5"))


def fetch_archive(name: str, out: str | Path, records: str | Path, lium_url: str, statmt_url: str) -> Path:
    """Download one archive (resuming, retrying) and check it against its record before renaming it into place."""
    rem = remote(name, load_records(records), lium_url, statmt_url)
    if not (rem.size or rem.sha256 or rem.md5):
        log.warning("%s: nothing is recorded for this archive (no published size or checksum): downloaded unchecked; "
                    "its extracted text is checked where a record exists", rem.url)
    return download(rem, out)


def extract_archive(name: str, archive: str | Path, out_dir: str | Path) -> Path:
    """Extract the members the corpus needs from one archive into `out_dir`."""
    if name in _SGM:
        pattern = _SGM[name]
        out = extract_tar(archive, out_dir, [], select=lambda m: pattern.fullmatch(m) is not None)
        try:
            for s in (DEV_SETS if name == "dev.tgz" else (TEST_SET,)):
                for lang in LANGS:
                    sgm_path(out, name, s, lang, "src")  # raises when neither the src nor the ref file is there
        except InputError:
            shutil.rmtree(out)  # not left looking complete
            raise
        return out
    wanted = set(members(name))
    return extract_tar(archive, out_dir, sorted(wanted), select=lambda m: m in wanted)


def sgm_path(folder: Path, archive: str, testset: str, lang: str, prefer: str) -> Path:
    """The SGM file of `testset` in language `lang`: `-src.` or `-ref.` (WMT releases have either), `prefer` first."""
    stem = "dev/" + testset if archive == "dev.tgz" else f"test-full/{testset}-fren"
    for role in (prefer, "ref" if prefer == "src" else "src"):
        path = Path(folder) / f"{stem}-{role}.{lang}.sgm"
        if path.exists():
            return path
    raise InputError(f"{archive}: neither {stem}-src.{lang}.sgm nor {stem}-ref.{lang}.sgm is in the archive")


def read_testset(folder: Path, archive: str, testset: str, src: str, tgt: str, texts: dict) -> tuple[list, list]:
    """Both sides of an SGM test set, each checked against its recorded text sha256 and against each other."""
    sides = []
    for lang, prefer in ((src, "src"), (tgt, "ref")):
        path = sgm_path(folder, archive, testset, lang, prefer)
        segs = read_sgm(path)
        digest = hashlib.sha256("".join(s + "\n" for s in segs).encode("utf-8")).hexdigest()
        if digest != texts[f"{testset}.{lang}"]:
            raise InputError(f"{path}: the extracted text of {testset}.{lang} does not match what is recorded "
                             f"(sha256: expected {texts[f'{testset}.{lang}']}, got {digest})")
        sides.append((path, segs))
    (p1, a), (p2, b) = sides
    if len(a) != len(b):
        raise InputError(f"{p1} has {len(a)} segments but {p2} has {len(b)}: a test set's sides must align")
    return sides


def run_wmt14_corpus(extracted: str | Path, selection: str, src: str, tgt: str, records_path: str | Path,
                     out_dir: str | Path, unicode: str = "NFC") -> dict:
    """Assemble raw train/dev/test from the extracted archives (folders `<extracted>/<archive>/`); counts per
    corpus go to corpus.json. Nothing is renamed into place unless every part was read without error."""
    extracted, out = Path(extracted), Path(out_dir)
    texts = load_records(records_path)["texts"]
    if selection == "lium":
        corpora = [(c, extracted / "bitexts.tgz" / "bitexts.selected" / f"{c}.{{lang}}.gz") for c in LIUM_CORPORA]
    else:
        corpora = [(corpus, extracted / name / f"{prefix}.{{lang}}{suffix}")
                   for name, (corpus, prefix, suffix) in FULL_CORPORA.items()]
    stats: dict = {"selection": selection, "train": {"corpora": {}}}
    with contextlib.ExitStack() as stack:
        with split_writers(out, "train", src, tgt, stack) as (fs, ft):
            for corpus, pattern in corpora:
                s_path, t_path = Path(str(pattern).format(lang=src)), Path(str(pattern).format(lang=tgt))
                counts = clean_pairs(s_path, t_path, fs, ft, invalid_utf8="drop", unicode=unicode)
                stats["train"]["corpora"][corpus] = counts
                log.info("train: %s: %d pairs of %d lines (%d empty, %d invalid UTF-8 dropped), %d %s words",
                         corpus, counts["pairs"], counts["lines"], counts["dropped_empty"],
                         counts["dropped_invalid_utf8"], counts["src_words"], src)
        totals = {k: sum(c[k] for c in stats["train"]["corpora"].values())
                  for k in next(iter(stats["train"]["corpora"].values()))}
        stats["train"].update(totals)
        for split, archive, sets in (("dev", "dev.tgz", DEV_SETS), ("test", "test-full.tgz", (TEST_SET,))):
            stats[split] = {"sets": {}}
            with split_writers(out, split, src, tgt, stack) as (fs, ft):
                for testset in sets:
                    (p1, a), (p2, b) = read_testset(extracted / archive, archive, testset, src, tgt, texts)
                    pairs = ((i, x.encode("utf-8"), y.encode("utf-8")) for i, (x, y) in enumerate(zip(a, b), 1))
                    counts = clean_stream(pairs, p1, p2, fs, ft, unicode=unicode, squeeze=split != "test")
                    stats[split]["sets"][testset] = {**counts, "source": str(p1), "target": str(p2)}
            for key in ("pairs", "unicode_normalised"):
                stats[split][key] = sum(c[key] for c in stats[split]["sets"].values())
        if selection == "lium":  # LIUM's own tokenized dev/test: recorded, and checked to align with the official sets
            lium = extracted / "dev+test.tgz" / "dev"
            stats["lium_devtest"] = {f"{s}.{lang}": count_lines(lium / f"{s}.{lang}") for s in ("ntst1213", "ntst14")
                                     for lang in LANGS}
            expected = {"ntst1213": stats["dev"]["pairs"], "ntst14": stats["test"]["pairs"]}
            for key, n in stats["lium_devtest"].items():
                if n != expected[key.split(".")[0]]:
                    log.warning("dev+test.tgz: %s has %d lines, the official set %d", key, n, expected[key.split(".")[0]])
        write_json_atomic(out / "corpus.json", stats)
    log.info("wmt14 (%s): %d training pairs, %d dev, %d test", selection, stats["train"]["pairs"],
             stats["dev"]["pairs"], stats["test"]["pairs"])
    return stats


def corpus(data: dict, seed: int, fetched: str | None, out_dir: str) -> dict:
    """Stage 1 for `data.source: wmt14`: the archives extracted into `fetched`."""
    w = data["wmt14"]
    return run_wmt14_corpus(fetched, w["selection"], data["src"], data["tgt"], w["records"], out_dir, data["unicode"])


SOURCE = Source("wmt14", corpus, section(
    "data.source: wmt14: WMT'14 en-fr; the paper's LIUM selection (348M words) or every corpus (850M)",
    selection={"enum": list(SELECTIONS)},
    lium_url={**FOLDER_URL, "description": "folder of bitexts.tgz and dev+test.tgz"},
    statmt_url={**FOLDER_URL, "description": "statmt.org or a mirror of its tree"},
    records={"type": "string", "minLength": 1, "description": "YAML of recorded sizes and checksums"}),
    check=lambda data: SOURCE.pair_check(data, LANGS, "is English-French (en-fr or fr-en)"),
    downloads=lambda data: archives(data["wmt14"]["selection"]),
    fetch=lambda file, out, w: fetch_archive(file, out, w["records"], w["lium_url"], w["statmt_url"]),
    extracted=True, pretokenized=lambda data: data["wmt14"]["selection"] == "lium")
