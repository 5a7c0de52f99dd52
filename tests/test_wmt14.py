"""data.source: wmt14, offline: a loopback HTTP server serves archives built here in the layout of the real ones
(LIUM's bitexts.tgz and dev+test.tgz; statmt.org's training tarballs, dev.tgz and test-full.tgz with quirky SGM),
checked against a records file written for them; then the Snakemake rules from download to the data report."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from rnnsearch.cli import main
from rnnsearch.data.corpus import wmt14
from rnnsearch.data.corpus.download import DownloadError
from rnnsearch.textio import InputError

from .conftest import REPO, repo_copy, run
from .test_download import Server


def tar_bytes(members: dict[str, bytes], mode: str = "w:gz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def lines(n: int, lang: str, tag: str) -> list[str]:
    words = {"en": "the house is small and the cat sleeps", "fr": "la maison est petite et le chat dort"}[lang].split()
    return [f"{tag} {i} " + " ".join(words[: 1 + i % len(words)]) for i in range(n)]


def text(rows: list[str]) -> bytes:
    return "".join(r + "\n" for r in rows).encode("utf-8")


def quirky_sgm(segments: list[str], setid: str, lang: str, role: str) -> bytes:
    """An SGM file with the real releases' quirks: upper-case tags, attributes in any order, <p> wrappers, a
    <seg> split over two lines, escaped entities, and a second document whose ids start at 7."""
    esc = [s.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;") for s in segments]
    half = len(esc) // 2
    out = [f'<{role}set setid="{setid}" srclang="any" trglang="{lang}">', '<DOC sysid="ref" docid="d1" genre="news">']
    for i, s in enumerate(esc[:half], 1):
        if i == 2:
            words = s.split(" ")
            out.append(f'<p>\n<seg id="{i}">{" ".join(words[:2])}\n   {" ".join(words[2:])}</seg>\n</p>')
        else:
            out.append(f'<SEG id="{i}">{s}</SEG>')
    out.append("</DOC>")
    out.append('<doc genre="news" docid="d2" origlang="fr">')
    out += [f'<seg id="{i}">{s}</seg>' for i, s in enumerate(esc[half:], 7)]
    out += ["</doc>", f"</{role}set>"]
    return ("\n".join(out) + "\n").encode("utf-8")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Mirror:
    """The loopback server with both trees (lium/ and statmt/) and a records file describing what it serves."""

    def __init__(self, tmp_path: Path):
        self.server = Server()
        self.tmp = tmp_path
        self.texts: dict[str, list[str]] = {}
        files: dict[str, bytes] = {}
        # LIUM: Moses-tokenized, escaped text; one pair with invalid UTF-8, one with an empty side
        bitexts = {}
        for c in wmt14.LIUM_CORPORA:
            en, fr = lines(40, "en", c), lines(40, "fr", c)
            en[3] = "it &apos;s the cat &quot; 1 &quot; &amp; co"
            fr[3] = "c&apos; est le chat"
            if c == "crawl":
                fr[6] = ""
            raw_en, raw_fr = text(en), text(fr)
            if c == "crawl":
                raw_en = raw_en.replace(b"crawl 5 the", b"crawl 5 \xff\xfe the")
            bitexts[f"bitexts.selected/{c}.en.gz"] = gzip.compress(raw_en)
            bitexts[f"bitexts.selected/{c}.fr.gz"] = gzip.compress(raw_fr)
        files["lium/bitexts.tgz"] = tar_bytes(bitexts)
        files["lium/dev+test.tgz"] = tar_bytes({"dev/ntst1213.en": text(lines(30, "en", "d")),
                                                "dev/ntst1213.fr": text(lines(30, "fr", "d")),
                                                "dev/ntst14.en": text(lines(12, "en", "t")),
                                                "dev/ntst14.fr": text(lines(12, "fr", "t"))})
        # statmt.org: raw text, other language pairs beside ours (not extracted)
        for name, (corpus, prefix, suffix) in wmt14.FULL_CORPORA.items():
            en, fr = text(lines(50, "en", corpus)), text(lines(50, "fr", corpus))
            if suffix == ".gz":
                en, fr = gzip.compress(en), gzip.compress(fr)
            members = {f"{prefix}.en{suffix}": en, f"{prefix}.fr{suffix}": fr,
                       f"{prefix.replace('fr-en', 'de-en')}.de{suffix}": b"ein Haus\n"}
            files[f"statmt/{wmt14_url(name)}"] = tar_bytes(members, "w" if name.endswith(".tar") else "w:gz")
        dev = {}
        for setid, n in (("newstest2012", 10), ("newstest2013", 8)):
            for lang, role in (("en", "src"), ("fr", "ref")):
                segs = lines(n, lang, setid)
                segs[0] = f'AT&T says "{setid}" <b> & co'
                self.texts[f"{setid}.{lang}"] = segs
                dev[f"dev/{setid}-{role}.{lang}.sgm"] = quirky_sgm(segs, setid, lang, role)
        files["statmt/wmt14/dev.tgz"] = tar_bytes(dev)
        test = {}
        for lang, role in (("en", "src"), ("fr", "ref"), ("fr", "src"), ("en", "ref")):
            segs = lines(12, lang, "newstest2014")
            self.texts[f"newstest2014.{lang}"] = segs
            test[f"test-full/newstest2014-fren-{role}.{lang}.sgm"] = quirky_sgm(segs, "newstest2014", lang, role)
        files["statmt/wmt14/test-full.tgz"] = tar_bytes(test)
        for path, data in files.items():
            self.server.files["/" + path] = data
        self.records = tmp_path / "records.yaml"
        self.write_records()

    def write_records(self, **override) -> None:
        recorded = yaml.safe_load((REPO / "workflow/resources/wmt14.yaml").read_text())
        for name, r in recorded["archives"].items():
            data = self.server.files["/" + ("lium/" if r["base"] == "lium" else "statmt/") + r["url"]]
            # like the real records: some archives have a sha256, some only an MD5 or a size, some nothing
            r.update(size=len(data) if r["size"] else None, sha256=sha(data) if r["sha256"] else None,
                     md5=hashlib.md5(data).hexdigest() if r["md5"] else None)
            r.update(override.get(name, {}))
        recorded["texts"] = {k: sha(text(v)) for k, v in self.texts.items()}
        self.records.write_text(yaml.safe_dump(recorded))

    @property
    def params(self) -> dict:
        return {"lium_url": self.server.url + "/lium", "statmt_url": self.server.url + "/statmt",
                "records": str(self.records)}


def wmt14_url(name: str) -> str:
    return yaml.safe_load((REPO / "workflow/resources/wmt14.yaml").read_text())["archives"][name]["url"]


@pytest.fixture
def mirror(tmp_path):
    m = Mirror(tmp_path)
    yield m
    m.server.httpd.shutdown()


def snakemake(ws: Path, *args: str) -> subprocess.CompletedProcess:
    return run(["snakemake", "--cores", "2", *args], ws, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("selection", ["lium", "full"])
def test_the_rules_take_both_selections_from_download_to_the_data_report(mirror, tmp_path, selection):
    """Download (one archive interrupted and resumed) → verify → extract → corpus → 3 shards → tokenize →
    clean → gather → filter → vocab → data report, through Snakemake."""
    ws = repo_copy(tmp_path / "ws", {"data": {"source": "wmt14", "wmt14": {"selection": selection, **mirror.params}},
                                     "aer": {"gold": "none"}, "prepare": {"shards": 3},
                                     "vocab": {"src_size": 20, "tgt_size": 20}})
    first = "/lium/bitexts.tgz" if selection == "lium" else "/statmt/wmt13/training-parallel-europarl-v7.tgz"
    mirror.server.drop[first] = (len(mirror.server.files[first]) // 3, 1)  # the first answer stops after a third
    dry = snakemake(ws, "all", "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    for job in ("download", "extract", "corpus", "shard", "tokenize_shard", "clean", "gather", "filter",
                "count", "vocab", "train", "translate", "data_report"):
        assert f"rule {job}:" in dry.stdout, job
    p = snakemake(ws, "results/data/report.md")
    assert p.returncode == 0, p.stderr[-3000:]

    ranges = [r for path, r in mirror.server.requests if path == first]
    assert ranges[0] is None and ranges[1].startswith("bytes=") and len(ranges) == 2  # resumed, not restarted
    corpus = json.loads((ws / "results/data/raw/corpus.json").read_text())
    assert corpus["dev"]["pairs"] == 18 and corpus["test"]["pairs"] == 12
    tok_train = (ws / "results/data/tok/train.en").read_text().splitlines()
    if selection == "lium":
        crawl = corpus["train"]["corpora"]["crawl"]
        assert (crawl["lines"], crawl["dropped_invalid_utf8"], crawl["dropped_empty"], crawl["pairs"]) == (40, 1, 1, 38)
        assert corpus["train"]["pairs"] == 6 * 40 - 2 and len(tok_train) == 238
        assert "it 's the cat \" 1 \" & co" in tok_train  # Moses escapes undone, not tokenized again
        assert corpus["lium_devtest"] == {"ntst1213.en": 30, "ntst1213.fr": 30, "ntst14.en": 12, "ntst14.fr": 12}
    else:
        assert set(corpus["train"]["corpora"]) == {c for c, _, _ in wmt14.FULL_CORPORA.values()}
        assert corpus["train"]["pairs"] == 250 and len(tok_train) == 250
        extracted = ws / "results/data/extract/wmt14/training-parallel-commoncrawl.tgz"
        assert sorted(p.name for p in extracted.glob("c*")) == ["commoncrawl.fr-en.en", "commoncrawl.fr-en.fr"]  # no de-en
    raw_test = (ws / "results/data/raw/test.fr").read_text().splitlines()
    assert raw_test == [" ".join(s.split()) for s in mirror.texts["newstest2014.fr"]]  # from SGM, official order
    assert (ws / "results/data/raw/dev.en").read_text().splitlines()[0] == 'AT&T says "newstest2012" <b> & co'
    assert sorted(p.name for p in (ws / "results/data/shards/clean").glob("*.json")) == [
        "1-of-3.json", "2-of-3.json", "3-of-3.json"]
    report = json.loads((ws / "results/data/report.json").read_text())
    assert report["steps"][-2]["step"].startswith("≤30") and report["coverage"]["test.en"]["words"] > 0
    corpora = report["corpora"]  # per corpus after each step, though the shards cut across corpora
    assert list(corpora) == (list(wmt14.LIUM_CORPORA) if selection == "lium" else
                             [c for c, _, _ in wmt14.FULL_CORPORA.values()])
    assert all(c["raw"]["pairs"] == c["tokenized"]["pairs"] == c["cleaned"]["pairs"] for c in corpora.values())
    assert sum(c["≤50"]["pairs"] for c in corpora.values()) == report["steps"][-1]["pairs"]
    assert "| crawl |" in (ws / "results/data/report.md").read_text() or selection == "full"
    assert (ws / "results/figures/lengths.png").stat().st_size > 1000
    log = (ws / f"results/logs/download/wmt14/{'training-giga-fren.tar' if selection == 'full' else 'dev.tgz'}.log")
    assert "nothing is recorded for this archive" in log.read_text()


def test_a_wrong_checksum_deletes_the_download_and_names_url_and_values(mirror, tmp_path):
    mirror.write_records(**{"test-full.tgz": {"md5": "0" * 32}})
    out = tmp_path / "test-full.tgz"
    with pytest.raises(DownloadError, match=r"/statmt/wmt14/test-full.tgz: the download does not match what is "
                                            r"recorded \(md5: expected 0{32}, got [0-9a-f]{32}\)"):
        wmt14.fetch_archive("test-full.tgz", out, mirror.records, **{k: v for k, v in mirror.params.items()
                                                                     if k != "records"})
    assert list(tmp_path.glob("test-full.tgz*")) == []


def test_a_truncated_archive_or_a_member_leaving_the_folder_is_refused(mirror, tmp_path):
    good = mirror.server.files["/statmt/wmt14/test-full.tgz"]
    (tmp_path / "cut.tgz").write_bytes(good[: len(good) // 2])
    with pytest.raises(InputError, match=r"cut.tgz: not a readable tar archive"):
        wmt14.extract_archive("test-full.tgz", tmp_path / "cut.tgz", tmp_path / "out")
    buf = io.BytesIO()  # a member we extract, as a link pointing out of the folder
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        link = tarfile.TarInfo("test-full/newstest2014-fren-src.en.sgm")
        link.type, link.linkname = tarfile.SYMTYPE, "../../escape.sgm"
        tar.addfile(link)
    (tmp_path / "evil.tgz").write_bytes(buf.getvalue())
    with pytest.raises(InputError, match=r"evil.tgz: refused to extract 'test-full/newstest2014-fren-src.en.sgm'"):
        wmt14.extract_archive("test-full.tgz", tmp_path / "evil.tgz", tmp_path / "out")
    (tmp_path / "dots.tgz").write_bytes(tar_bytes({"../training/europarl-v7.fr-en.en": b"x"}))
    with pytest.raises(InputError, match=r"dots.tgz: expected member\(s\) missing after extraction: "
                                         r"training/europarl-v7.fr-en.en"):  # a "../" name is never selected
        wmt14.extract_archive("training-parallel-europarl-v7.tgz", tmp_path / "dots.tgz", tmp_path / "out")
    (tmp_path / "empty.tgz").write_bytes(tar_bytes({"test-full/README": b"x"}))
    with pytest.raises(InputError, match=r"neither test-full/newstest2014-fren-src.en.sgm nor .*-ref.en.sgm"):
        wmt14.extract_archive("test-full.tgz", tmp_path / "empty.tgz", tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "escape.sgm").exists()


def test_mismatched_line_counts_stop_the_corpus_naming_both_files(mirror, tmp_path):
    extracted = tmp_path / "extracted"
    for name in wmt14.archives("full"):
        data = mirror.server.files["/statmt/" + wmt14_url(name)]
        (tmp_path / name).write_bytes(data)
        wmt14.extract_archive(name, tmp_path / name, extracted / name)
    un = extracted / "training-parallel-un.tgz/un/undoc.2000.fr-en.fr"
    un.write_bytes(un.read_bytes() + b"une ligne de trop\n")
    with pytest.raises(InputError, match=r"undoc.2000.fr-en.en has 50 lines but .*undoc.2000.fr-en.fr has 51"):
        wmt14.run_wmt14_corpus(extracted, "full", "en", "fr", mirror.records, tmp_path / "raw")
    assert not list((tmp_path / "raw").glob("train.*"))  # nothing left looking complete
    un.write_bytes(un.read_bytes()[: -len(b"une ligne de trop\n")])
    stats = wmt14.run_wmt14_corpus(extracted, "full", "fr", "en", mirror.records, tmp_path / "raw")  # fr→en too
    assert stats["train"]["pairs"] == 250
    assert (tmp_path / "raw/test.fr").read_text().splitlines()[1] == " ".join(mirror.texts["newstest2014.fr"][1].split())


def test_a_test_set_whose_text_is_not_the_recorded_one_is_refused(mirror, tmp_path):
    mirror.texts["newstest2013.fr"] = ["autre chose"]
    mirror.write_records()
    (tmp_path / "dev.tgz").write_bytes(mirror.server.files["/statmt/wmt14/dev.tgz"])
    out = wmt14.extract_archive("dev.tgz", tmp_path / "dev.tgz", tmp_path / "x" / "dev.tgz")
    texts = wmt14.load_records(mirror.records)["texts"]
    with pytest.raises(InputError, match=r"newstest2013-ref.fr.sgm: the extracted text of newstest2013.fr does not "
                                         r"match what is recorded \(sha256: expected"):
        wmt14.read_testset(out, "dev.tgz", "newstest2013", "en", "fr", texts)


def test_the_download_stage_through_the_cli(mirror, tmp_path):
    overlay = tmp_path / "o.yaml"
    overlay.write_text(yaml.safe_dump({"data": {"source": "wmt14", "wmt14": mirror.params}, "aer": {"gold": "none"}}))
    assert main(["download", "--params", str(REPO / "params.yaml"), "--params", str(overlay), "--file",
                 "dev+test.tgz", "--out", str(tmp_path / "dev+test.tgz")]) == 0
    assert (tmp_path / "dev+test.tgz").read_bytes() == mirror.server.files["/lium/dev+test.tgz"]
    assert main(["download", "--params", str(REPO / "params.yaml"), "--params", str(overlay), "--file",
                 "nonsense.tgz", "--out", str(tmp_path / "n")]) != 0


def test_real_sgm_look_alike_archives_give_the_plain_newstest_text_byte_for_byte(shared_data, tmp_path):
    """dev.tgz / test-full.tgz built from the official SGM files in ../shared/data: the extracted text equals the
    plain newstest2012/2013/2014 files and the sha256 recorded in workflow/resources/wmt14.yaml."""
    sgm = shared_data / "sgm"
    (tmp_path / "dev.tgz").write_bytes(tar_bytes({f"dev/{p.name}": p.read_bytes() for p in sgm.glob("newstest201[23]-*")}))
    (tmp_path / "test-full.tgz").write_bytes(tar_bytes({f"test-full/{p.name}": p.read_bytes()
                                                        for p in sgm.glob("newstest2014-*")}))
    texts = wmt14.load_records(REPO / "workflow/resources/wmt14.yaml")["texts"]
    for archive, sets in (("dev.tgz", wmt14.DEV_SETS), ("test-full.tgz", (wmt14.TEST_SET,))):
        out = wmt14.extract_archive(archive, tmp_path / archive, tmp_path / "x" / archive)
        for testset in sets:
            for src, tgt in (("en", "fr"), ("fr", "en")):
                if archive == "dev.tgz" and src == "fr":
                    continue  # the dev SGM files here are src.en and ref.fr only
                (_, a), (_, b) = wmt14.read_testset(out, archive, testset, src, tgt, texts)
                assert text(a) == (shared_data / testset / f"{testset}.{src}").read_bytes()
                assert text(b) == (shared_data / testset / f"{testset}.{tgt}").read_bytes()
                assert len(a) == {"newstest2012": 3003, "newstest2013": 3000, "newstest2014": 3003}[testset]
