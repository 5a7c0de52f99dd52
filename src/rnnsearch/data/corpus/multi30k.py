"""`data.source: multi30k`: Multi30k task 1 English-French (Elliott et al. 2016), downloaded.

Image captions with human translations: train on `train` (29,000 pairs), validate on `val` (1,014), test on
`test_2016_flickr` (1,000; `data.multi30k.test` picks another official test set). Each file is
`<data.multi30k.url>/<name>.<lang>.gz`.

The dataset repository publishes no checksums, and its gzip files are not byte-stable across re-compression, so
what is recorded here is the sha256 of each *decompressed* text. `fetch` downloads the .gz (resuming, retrying), decompresses it to a
temporary name and renames it into place only if that sha256 matches; otherwise the download is deleted and the
error names the URL and both values.
"""

from __future__ import annotations

import logging
from pathlib import Path

from rnnsearch.data.corpus.download import DownloadError, Remote, download, gunzip
from rnnsearch.data.corpus.local import run_local_corpus
from rnnsearch.data.corpus.source import URL as FOLDER_URL
from rnnsearch.data.corpus.source import Source, section
from rnnsearch.textio import InputError

log = logging.getLogger("rnnsearch.corpus")

URL = "https://github.com/multi30k/dataset/raw/master/data/task1/raw"
TRAIN, DEV = "train", "val"
TESTS = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")
LANGS = ("en", "fr")

TEXT_SHA256 = {
    "train.en": "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6",
    "train.fr": "5925a3c18f1587b6b54b87743106e6e8ab93618edb6f65d19eac0621f853a10d",
    "val.en": "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227",
    "val.fr": "5304e444d842e962b2dda4d816b70b22a1765b15401642b7ca37a67477e708dc",
    "test_2016_flickr.en": "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182",
    "test_2016_flickr.fr": "cb3160d69b002bb638e66cc7612fcd56cb0af82eadc9c142dedc438afb885ef6",
    "test_2017_flickr.en": "ce1450ddc5ab0834502579d77a170849952e15a2938b34cc503bdc25ebb4fb98",
    "test_2017_flickr.fr": "6f3764e31dac41e9455e612958bcfd4e877c5e15cd66df2c2b2be6d9bd83e5b6",
    "test_2017_mscoco.en": "43051fdfa86fd5395182e718a94ca67b1b227b9f7c79596ff0f6b813216981d2",
    "test_2017_mscoco.fr": "39cde3f43f32b0a6bf29ce4917a46329ff32e53070c2fac87506695a740ae0a0",
    "test_2018_flickr.en": "4e585c2dd525911a6ea7730e9d0b516239af3f1b1ffae6a2130223cfb639f25e",
    "test_2018_flickr.fr": "234b4a887da0da4801a3e2c6f21336231ff7dd46daeb80cfa1b551c8bbb78239",
}


def split_names(test: str) -> dict[str, str]:
    """The pipeline's splits → Multi30k file names."""
    return {"train": TRAIN, "dev": DEV, "test": test}


def files(test: str, src: str, tgt: str) -> list[str]:
    """The decompressed files a run needs, e.g. train.en."""
    return [f"{name}.{lang}" for name in split_names(test).values() for lang in (src, tgt)]


def fetch(file: str, out: str | Path, url: str = URL) -> Path:
    """Download `<url>/<file>.gz` and decompress it to `out`, checked against the recorded sha256."""
    if file not in TEXT_SHA256:
        raise InputError(f"{file}: not a Multi30k task-1 file with a recorded checksum "
                         f"({', '.join(sorted(TEXT_SHA256))})")
    out = Path(out)
    gz = out.with_name(out.name + ".gz")
    remote = Remote(f"{url.rstrip('/')}/{file}.gz")
    download(remote, gz)
    try:
        gunzip(gz, out, TEXT_SHA256[file])
    except InputError as e:
        gz.unlink(missing_ok=True)
        raise DownloadError(f"{remote.url}: {e}; the download was deleted, run again to fetch it afresh") from None
    gz.unlink()
    log.info("%s: decompressed text sha256 %s matches", out, TEXT_SHA256[file])
    return out


def run_multi30k_corpus(downloads: str | Path, test: str, src: str, tgt: str, out_dir: str, unicode: str = "NFC"
                        ) -> dict:
    """The downloaded splits, cleaned by the rules of `data.source: local`, as the raw train/dev/test files."""
    downloads = Path(downloads)
    prefixes = {split: str(downloads / name) for split, name in split_names(test).items()}
    return run_local_corpus(prefixes, src, tgt, out_dir, unicode)


def corpus(data: dict, seed: int, fetched: str | None, out_dir: str) -> dict:
    """Stage 1 for `data.source: multi30k`: the files downloaded into `fetched`."""
    return run_multi30k_corpus(fetched, data["multi30k"]["test"], data["src"], data["tgt"], out_dir, data["unicode"])


SOURCE = Source("multi30k", corpus, section(
    "data.source: multi30k: where the task-1 raw .gz files are, and which official test set is 'test'",
    url={**FOLDER_URL, "description": "folder URL of <name>.<lang>.gz (a mirror is fine)"}, test={"enum": list(TESTS)}),
    check=lambda data: SOURCE.pair_check(data, LANGS, f"has checksums recorded for {' and '.join(LANGS)} only"),
    downloads=lambda data: files(data["multi30k"]["test"], data["src"], data["tgt"]),
    fetch=lambda file, out, settings: fetch(file, out, settings["url"]))
