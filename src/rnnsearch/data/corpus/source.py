"""What a `data.source` is: one module of rnnsearch.data.corpus with a `SOURCE` record, registered in
rnnsearch.data.corpus.SOURCES. The record is all the pipeline knows of it: its params section, its checks, what
it downloads and how, what stage 1 reads, and how stage 1 makes the raw train/dev/test text from that."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable


def _none(data: dict) -> list:
    return []


def section(description: str, **keys: dict) -> dict:
    """The JSON schema of a source's `data.<name>`: an object of exactly `keys` (each its schema), all required."""
    return {"type": "object", "additionalProperties": False, "required": list(keys), "description": description,
            "properties": keys}


URL = {"type": "string", "pattern": "^(https?|file)://"}  # a folder URL (a mirror, or file:// for a local copy)


@dataclass(frozen=True)
class Source:
    """A source of parallel text for stage 1.

    `corpus(data, seed, fetched, out_dir)` writes `{split}.{src}`, `{split}.{tgt}` (train, dev, test) and
    corpus.json into `out_dir`: `data` is params.yaml's `data:`, `fetched` the folder of what its downloads
    left (None for a source that downloads nothing). `section`: the JSON schema of `data.<name>`, needed only
    when the source is chosen. `check(data)`: problems of the configuration, each a sentence naming its key.
    A downloaded source names the files of a run (`downloads(data)`) and fetches one (`fetch(file, out,
    section)`, checked against what it records); `extracted`: each download is an archive that the extract
    stage unpacks, and stage 1 reads the extracted folders. `inputs(data)`: files of the user's that stage 1
    reads (data.local). `gold_links`: it writes test.align, gold alignments of the test set (aer.gold:
    synthetic). `pretokenized(data)`: its training text is Moses-tokenized already."""

    name: str
    corpus: Callable[[dict, int, str | None, str], object]
    section: dict | None = None
    check: Callable[[dict], list[str]] = _none
    downloads: Callable[[dict], list[str]] = _none
    fetch: Callable[[str, str, dict], Path] | None = None
    extracted: bool = False
    inputs: Callable[[dict], list[str]] = _none
    gold_links: bool = False
    pretokenized: Callable[[dict], bool] = lambda data: False

    def pair_check(self, data: dict, langs: tuple[str, ...], what: str) -> list[str]:
        """The language pair against the only languages the source has (`what` says why)."""
        pair = (data["src"], data["tgt"])
        if set(pair) <= set(langs):
            return []
        return [f"'data.src', 'data.tgt': data.source {self.name} {what}, got {pair[0]}-{pair[1]}"]
