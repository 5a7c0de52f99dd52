"""Stages 7–9: BLEU (tokenized and sacreBLEU), bootstrap, Tables 1–2, Figures 2–3, AER and the results page."""
