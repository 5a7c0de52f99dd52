"""rnnsearch: Bahdanau, Cho & Bengio (2015), Neural Machine Translation by Jointly Learning to Align and
Translate, from raw text to the paper's tables and figures (`rnnsearch <stage>`, Snakemake, DVC)."""
