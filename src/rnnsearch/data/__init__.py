"""Stages 0–4 and the data report: the corpus of each source (`corpus/`), Moses tokenization, cleaning and length
filters, shortlists, and the paper's length-sorted minibatches."""
