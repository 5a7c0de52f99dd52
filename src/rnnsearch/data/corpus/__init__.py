"""Stage 1, the raw train/dev/test text of each `data.source`: generated (`synthetic`), copied (`local`), or
assembled from the downloads (`multi30k`, `wmt14`)."""

from __future__ import annotations

from rnnsearch.textio import InputError


def run_corpus(data: dict, seed: int, out_dir: str, downloads: str | None = None, extracted: str | None = None) -> None:
    """Write `{split}.{lang}` under `out_dir` from the source `data.source` names."""
    src, tgt, source = data["src"], data["tgt"], data["source"]
    if source == "wmt14":
        from rnnsearch.data.corpus.wmt14 import run_wmt14_corpus

        if not extracted:
            raise InputError("corpus: data.source wmt14 needs --extracted (the folder of the extracted archives)")
        w = data["wmt14"]
        run_wmt14_corpus(extracted, w["selection"], src, tgt, w["records"], out_dir, data["unicode"])
    elif source == "multi30k":
        from rnnsearch.data.corpus.multi30k import run_multi30k_corpus

        if not downloads:
            raise InputError("corpus: data.source multi30k needs --downloads (the folder of the downloaded files)")
        run_multi30k_corpus(downloads, data["multi30k"]["test"], src, tgt, out_dir, data["unicode"])
    elif source == "local":
        from rnnsearch.data.corpus.local import run_local_corpus

        run_local_corpus(data["local"], src, tgt, out_dir, data["unicode"])
    else:
        from rnnsearch.data.corpus import synthetic

        s = data["synthetic"]
        corpus = synthetic.generate(seed, s["n_train"], s["n_dev"], s["n_test"], s["nouns"], s["adjectives"],
                                    s["verbs"], s["names"], s["max_len"], s["zipf"])
        synthetic.write_corpus(corpus, out_dir)
