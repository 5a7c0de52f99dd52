"""Stage 1, the raw train/dev/test text of each `data.source`: generated (`synthetic`), copied (`local`), or
assembled from the downloads (`multi30k`, `wmt14`).

Each source is one module of this package with a `SOURCE` record (rnnsearch.data.corpus.source.Source), listed
in `SOURCES`: a new source is its module and its line here. The configuration's checks, the rules' inputs and
the download and corpus stages all read the record."""

from __future__ import annotations

from pathlib import Path

from rnnsearch.data.corpus import local, multi30k, synthetic, wmt14
from rnnsearch.data.corpus.source import Source
from rnnsearch.textio import InputError

SOURCES: dict[str, Source] = {s.name: s for s in (synthetic.SOURCE, local.SOURCE, multi30k.SOURCE, wmt14.SOURCE)}


def run_corpus(data: dict, seed: int, out_dir: str, fetched: str | None = None) -> None:
    """Write `{split}.{lang}` under `out_dir` from the source `data.source` names (`fetched`: the folder of what
    a downloaded source fetched)."""
    source = SOURCES[data["source"]]
    if (source.fetch is not None) != (fetched is not None):
        raise InputError(f"corpus: data.source {source.name} " + ("needs --fetched (the folder of its downloads)"
                                                                  if fetched is None else "downloads nothing: "
                                                                  f"--fetched {fetched} is for a downloaded source"))
    source.corpus(data, seed, fetched, out_dir)


def fetch(file: str, out: str, source: str, section: dict) -> Path:
    """Stage 0: one file of the downloaded source `source` (resumed, retried, checked against what it records),
    with its settings `section` (data.<source>)."""
    if SOURCES[source].fetch is None:
        raise InputError(f"download: data.source {source} downloads nothing")
    return SOURCES[source].fetch(file, out, section)
