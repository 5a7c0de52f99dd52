"""Shard (scatter), clean, gather, per-shard counts merged into shortlists: the same result as doing it in one
piece, the cleaning rules counted, bad input named; and the data benchmark runs and reports what it measured."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from rnnsearch.settings import VocabConfig
from rnnsearch.bench.data import run_bench_data
from rnnsearch.data.prepare import run_clean, run_gather, run_shard, shard_bounds
from rnnsearch.data.vocab import (
    Vocab,
    build_vocab,
    count_words,
    merge_counts,
    run_count,
    run_vocab,
)
from rnnsearch.textio import InputError


@pytest.mark.parametrize("n,k", [(10, 3), (3, 5), (0, 2), (7, 1)])
def test_shard_bounds_cover_every_line_once_in_order(n, k):
    bounds = shard_bounds(n, k)
    assert len(bounds) == k and bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [e - s for s, e in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_shard_then_gather_gives_the_file_back(tmp_path):
    src, tgt = tmp_path / "a.en", tmp_path / "a.fr"
    src.write_text("".join(f"s{i}\n" for i in range(11)))
    tgt.write_text("".join(f"t{i}\n" for i in range(11)))
    outs = [[str(tmp_path / f"{i}.{lang}") for i in range(4)] for lang in ("en", "fr")]
    assert run_shard(str(src), str(tgt), *outs) == {"lines": 11, "shards": [3, 3, 3, 2]}
    assert (tmp_path / "3.fr").read_text() == "t9\nt10\n"
    run_gather(outs[0], str(tmp_path / "back.en"))
    assert (tmp_path / "back.en").read_bytes() == src.read_bytes()
    tgt.write_text("only one line\n")
    with pytest.raises(InputError, match=r"a.en has 11 lines but .*a.fr has 1"):
        run_shard(str(src), str(tgt), *outs)
    with pytest.raises(InputError, match=r"nowhere: file not found"):
        run_gather([str(tmp_path / "nowhere")], str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()


def test_cleaning_drops_by_rule_and_counts(tmp_path):
    pairs = [("a b c", "x y z"), ("a", ""), (" ".join("w" * 12), "v"), ("a b", "x " * 5), ("a b c d", "x y")]
    (tmp_path / "s").write_text("".join(a + "\n" for a, _ in pairs))
    (tmp_path / "t").write_text("".join(b + "\n" for _, b in pairs))
    stats = run_clean(tmp_path / "s", tmp_path / "t", tmp_path / "cs", tmp_path / "ct", max_len=10, max_ratio=2.0,
                      stats=tmp_path / "c.json")
    assert (stats["pairs_in"], stats["pairs"], stats["dropped_empty"], stats["dropped_long"], stats["dropped_ratio"]) \
        == (5, 2, 1, 1, 1)
    assert (tmp_path / "cs").read_text().splitlines() == ["a b c", "a b c d"]  # the ratio 2.0 itself is kept
    assert json.loads((tmp_path / "c.json").read_text()) == stats
    open_limits = run_clean(tmp_path / "s", tmp_path / "t", tmp_path / "cs", tmp_path / "ct", 0, 0)
    assert open_limits["pairs"] == 4 and open_limits["dropped_empty"] == 1


def test_merged_shard_counts_give_the_shortlist_of_the_whole_text(tmp_path):
    lines = [" ".join(f"w{(i * j) % 37}" for j in range(1 + i % 9)) + " é [UNK]" for i in range(300)]
    whole = count_words(lines)
    files = []
    for k in range(3):
        (tmp_path / f"{k}.txt").write_text("".join(x + "\n" for x in lines[k::3]), encoding="utf-8")
        run_count(str(tmp_path / f"{k}.txt"), str(tmp_path / f"{k}.counts"))
        files.append(str(tmp_path / f"{k}.counts"))
    assert dict(merge_counts(files)) == dict(whole)
    stats = run_vocab(files, files, tmp_path / "v.src", tmp_path / "v.tgt", VocabConfig("shortlist", 10, 10),
                      tmp_path / "v.json")
    expected = build_vocab(whole, 10)
    assert Vocab.load(tmp_path / "v.src").words == expected.words and expected.words.count("[UNK]") == 1
    total = sum(c for w, c in whole.items() if w != "[UNK]")
    assert stats["src"]["tokens"] == total
    assert stats["src"]["coverage"] == round(sum(expected.counts) / total, 5)
    (tmp_path / "bad.counts").write_text("b\t1\na\t2\n")
    with pytest.raises(InputError, match=r"bad.counts:2: expected 'word<TAB>count' lines in increasing word order"):
        list(merge_counts([str(tmp_path / "bad.counts")]))


def test_the_data_benchmark_reports_rates_memory_and_the_projection(tmp_path):
    for lang, word in (("en", "house"), ("fr", "maison")):
        (tmp_path / f"t.{lang}").write_text("".join(f"The {word}-{i} isn't small, it's \"big\".\n" for i in range(400)))
        (tmp_path / f"p.{lang}").write_text("it &apos;s &quot; big &quot;\n" * 400)
    r = run_bench_data([("en", str(tmp_path / "t.en")), ("fr", str(tmp_path / "t.fr"))],
                       [("en", str(tmp_path / "p.en"))], str(tmp_path / "d.json"), str(tmp_path / "d.md"), shards=2)
    assert [t["path"] for t in r["tokenize"]] == ["Moses tokenizer"] * 2 + ["unescape (--pretokenized)"]
    assert all(t["sentences"] == 400 and t["words_per_s"] > 0 and t["peak_rss_mb"] > 0 for t in r["tokenize"])
    assert r["tokenize"][0]["tokens_out"] > r["tokenize"][0]["words_in"]  # Moses split the punctuation off
    assert r["vocab_memory"][0]["types"] == len(Counter(w for i in range(400) for w in
                                                        f"The house-{i} isn't small, it's \"big\".".split()))
    p = r["projection"]["full"]
    assert p["hours_1_cores"] > p["hours_32_cores"] > 0 and set(r["stages"][0]["words_per_s"]) == {
        "corpus", "shard", "clean", "count", "gather", "filter"}
    assert "| full | 850,000,000 |" in (tmp_path / "d.md").read_text()


@pytest.mark.slow
def test_the_scale_benchmark_runs_every_data_stage_and_training_start_up(tmp_path, monkeypatch):
    """Its plumbing on 400 pairs: every stage by its command with its own peak memory, start-up of 1 and of 2
    processes (torchrun) on the set and on its 200-pair baseline, and on the text; the table. Relative paths, as
    the rule gives them; the corpora in the default folder beside the JSON."""
    from rnnsearch.bench.scale import run_bench_scale

    monkeypatch.chdir(tmp_path)
    r = run_bench_scale([0.0004], "bench/s.json", "bench/s.md")
    (run,) = r["runs"]
    assert run["pairs"] == 400 and list(run["stages"]) == ["corpus", "shard", "tokenize", "clean", "gather", "filter",
                                                            "count", "vocab", "binarize"]
    # each job's own peak (10 MB to 1 GB: some stages import torch, some not), not the benchmark's
    assert all(s["seconds"] > 0 and 10 < s["peak_rss_mb"] < 1024 for s in run["stages"].values())
    assert run["stages"]["tokenize"]["jobs"] == 2 and run["shards"] == 1  # one shard, two languages
    assert len({s["peak_rss_mb"] for s in run["stages"].values()}) > 3
    for name, pairs in (("train50", run["pairs"]), ("base200", 200)):
        one, two = run["startup"][name]
        assert (one["processes"], two["processes"]) == (1, 2) and one["pairs"] == two["pairs"] <= pairs
        assert 0 < one["seconds_to_first_update"] and 0 < one["pss_mb_summed"] < two["pss_mb_summed"]
        assert one["first_update"]["batch"][0] <= 80 and one["first_update"]["peak_rss_mb"] >= one["peak_rss_mb"]
    (text,) = run["startup"]["text"]  # the same set read as text, as training did before binarize
    assert text["pairs"] == run["startup"]["train50"][0]["pairs"] and text["seconds_to_first_update"] > 0
    assert text["first_update"]["batch"] == run["startup"]["train50"][0]["first_update"]["batch"]
    assert r["goals"]["pairs"] == 400 and not r["goals"]["met"]["stage_time_within_1.3x_linear"]  # one N
    md = (tmp_path / "bench/s.md").read_text()
    assert "| binarize |" in md and "| start-up on its first 200 pairs, 2 processes" in md
    assert list((tmp_path / "bench/scale-work").iterdir()) == []  # each corpus deleted once measured


def test_the_scale_benchmark_compares_with_linear_and_the_baseline_and_projects():
    """The goals and the projection from two runs of known figures."""
    from rnnsearch.bench.scale import goals, markdown, projection

    def run(pairs, seconds, startup, rss, pss):
        point = lambda s, r, p: {"seconds_to_first_update": s, "peak_rss_mb": r, "pss_mb_summed": p,  # noqa: E731
                                 "first_update": {"seconds": 1.0, "peak_rss_mb": 900.0, "batch": [80, 40, 41]}}
        stages = {n: {"seconds": t, "peak_rss_mb": 100.0} for n, t in seconds.items()}
        return {"pairs": pairs, "shards": 1, "stages": stages,
                "startup": {"train50": [point(startup, rss, pss), point(startup, rss, 1.5 * pss)],
                            "base200": [point(2.0, 300.0, 250.0), point(2.0, 300.0, 400.0)],
                            "text": [point(9 * startup, 9 * rss, pss)]}}

    small = run(1_000_000, {"tokenize": 10.0, "gather": 0.2}, 3.0, 320.0, 260.0)
    big = run(4_000_000, {"tokenize": 52.0, "gather": 2.0}, 4.0, 380.0, 300.0)
    g = goals([small, big])
    assert g["stage_time_over_linear"] == {"tokenize": 1.3, "gather": 2.5} and g["stage_time_compared"] == ["tokenize"]
    assert g["startup_peak_rss_over_baseline_mb"] == 80.0 and g["corpus_pss_mb"] == {"one_process": 50.0,
                                                                                     "two_processes": 50.0}
    assert g["met"] == {"startup_at_most_10_s": True, "rss_within_200_mb_of_baseline": True,
                        "pss_of_two_at_most_1.3x_one": False, "stage_rss_at_most_1_gb": True,
                        "stage_time_within_1.3x_linear": True}
    p = projection(big)["12M"]  # the baseline plus what the corpus added, times 3
    assert (p["startup_seconds"], p["startup_peak_rss_mb"], p["stage_seconds"]["tokenize"]) == (8.0, 540.0, 156.0)
    assert p["label"].startswith("projection from the 4,000,000-pair run")
    md = markdown({"machine": {"processor": "x", "cpus": 2}, "runs": [small, big], "goals": g,
                   "projection": projection(big)})
    assert "| tokenize | 10.0 s, 100 | 52.0 s, 100 |" in md and "Goals met: startup_at_most_10_s: yes" in md
