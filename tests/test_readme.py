"""README.md, the front door, tested: short sentences, no commit but the results table's, and every figure it
quotes stated by the docs page it links to (the results table cell by cell against docs/results.md's).
test_docs.py checks its commands."""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import REPO

README = REPO / "README.md"
NUMBER = re.compile(r"(?<![\w.+-])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w.]*\w)|(?<![\w.+-])\d+\.\d+(?![\w.]*\w)")


def paragraphs(text: str) -> list[str]:
    """The prose of a Markdown page: paragraphs without code blocks, tables, headings or inline code."""
    text = re.sub(r"```.*?```", "\n\n", text, flags=re.S)
    out = []
    for block in text.split("\n\n"):
        lines = [x for x in block.splitlines() if x.strip() and not x.startswith(("|", "#"))]
        if lines:
            out.append(re.sub(r"`[^`]*`", "CODE", " ".join(lines)))
    return out


def sentences(paragraph: str) -> list[str]:
    prose = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", paragraph)  # a link counts as its words
    return re.split(r"(?<=[.!?:])\s+(?=[A-Z(])", prose)


def test_readme_sentences_are_at_most_40_words_and_it_names_one_commit():
    long = [(len(s.split()), s[:120]) for p in paragraphs(README.read_text(encoding="utf-8"))
            for s in sentences(p) if len(s.split()) > 40]
    assert not long, f"README.md sentences over 40 words: {long}"
    text = README.read_text(encoding="utf-8")
    hashes = re.findall(r"(?<![\w/.-])[0-9a-f]{7,40}(?![\w/-]|\.\w)", text)
    commits = [h for h in hashes if re.search(r"[a-f]", h) and re.search(r"\d", h)]
    results = text[text.index("## Results of the default run"):]
    assert len(commits) == 1 and commits[0] in results.split("|")[0], commits  # the results table's, only


def _numbers(text: str) -> set[float]:
    return {float(n.replace(",", "")) for n in NUMBER.findall(text)}


def _decimals(figure: str) -> int:
    return len(figure.split(".")[1]) if "." in figure else 0


def test_every_figure_readme_quotes_is_stated_by_the_docs_page_it_links_to():
    """A figure (a decimal or a number with thousands separators) in a README paragraph that links to docs pages
    must be on one of them, as written or rounded from the page's figure to as many decimals."""
    checked = 0
    for paragraph in paragraphs(README.read_text(encoding="utf-8")):
        pages = {REPO / m for m in re.findall(r"\]\((docs/[\w.-]+\.md)(?:#[\w-]+)?\)", paragraph)}
        if not pages:
            continue
        stated = set().union(*(_numbers(p.read_text(encoding="utf-8")) for p in pages))
        for figure in NUMBER.findall(paragraph):
            value, digits = float(figure.replace(",", "")), _decimals(figure)
            assert any(round(s, digits) == value for s in stated), \
                f"README.md quotes {figure}, which {', '.join(p.name for p in pages)} does not state: {paragraph[:200]}"
            checked += 1
    assert checked >= 3, checked  # 5,123 pairs/s, 49.7 and 29.6 sacreBLEU, 1,000 test sentences


def _table(text: str, heading: str) -> dict[str, list[str]]:
    """{model: cells} of the first table after `heading` whose header starts `| model |`."""
    rows = text[text.index(heading):].split("| model |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    return {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]] for r in rows}


def test_the_readme_results_table_rounds_docs_results_md():
    ours = _table(README.read_text(encoding="utf-8"), "## Results of the default run")
    docs = _table((REPO / "docs" / "results.md").read_text(encoding="utf-8"), "## The default run")
    assert list(ours) == list(docs) == ["RNNencdec-30", "RNNsearch-30", "RNNencdec-50", "RNNsearch-50"]
    for model, cells in ours.items():
        for shown, full in zip(cells, docs[model], strict=True):
            a, b = ([float(x) for x in cell.split(" ± ")] for cell in (shown, full))
            # one decimal of the docs' two, each rounded from the run's figure (0.253 → 0.25 there, 0.3 here)
            assert len(a) == len(b) and all(abs(x - y) <= 0.05 + 0.005 + 1e-9 for x, y in zip(a, b)), \
                (model, shown, full)
