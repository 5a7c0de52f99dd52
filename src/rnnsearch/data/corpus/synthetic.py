"""The embedded English-like → French-like language pair (`data.source: synthetic`).

A seeded generator, no network, no files: a lexicon of a few thousand invented words and a small grammar
that together carry the phenomena the paper's argument rests on (§1, §5.2 of Bahdanau et al. 2015):

* **local reordering**: adjectives precede the noun in the source and follow it, in reverse order, in the
  target ("european economic area" → "zone économique européenne"); a few adjectives keep their place
  ("BAGS" adjectives, as in French); negation is discontinuous ("does not see" → "ne voit pas");
* **agreement morphology**: determiners and adjectives take the gender and number of their noun, verbs the
  number of their subject, across a relative clause if need be;
* **one-to-many / many-to-one**: "walked" → "a marché", "because" → "parce que", "of the" → "du",
  "will see" → "verra", two-word source compounds → one target noun, source nouns → "N de N";
* **rare words**: Zipf-distributed nouns, adjectives, verbs and names, so a frequency shortlist leaves a
  tail of `[UNK]` (names are copied unchanged, as in real news text).

Sentences are built as token lists in both languages at once, then written as raw text (capitalised,
punctuation attached, French elision "l'arbre") so that the tokenize stage has real work to do.
Lengths run from 1 to well beyond 60 tokens.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random

from rnnsearch.data.corpus.lexicon import Adjective, Lexicon
from rnnsearch.data.corpus.source import Source, section
from rnnsearch.textio import write_json_atomic, write_lines_atomic

# --------------------------------------------------------------------------------------------- function words

_VOWELS = set("aeiouéèyâ")

# Determiners: English form → (number, French form by gender, or a single plural form).
_DETS_SG = {"the": ("le", "la"), "a": ("un", "une"), "this": ("ce", "cette"), "my": ("mon", "ma")}
_DETS_PL = {"the": "les", "some": "des", "these": "ces", "my": "mes"}
_PREPS = {"of": "de", "to": "à", "in": "dans", "on": "sur", "with": "avec", "for": "pour",
          "without": "sans", "after": "après", "before": "avant"}
_CONJ = {"and": ["et"], "but": ["mais"], "because": ["parce", "que"], "while": ["tandis", "que"],
         "although": ["bien", "que"]}
_PRONOUNS = {"he": ("il", "sg"), "she": ("elle", "sg"), "they": ("ils", "pl"), "we": ("nous", "we")}


# --------------------------------------------------------------------------------------------- grammar

class _Zipf:
    """Sample indices 0..n-1 with P(r) ∝ 1/(r+1)^s: a few very frequent words and a long rare tail."""

    def __init__(self, n: int, s: float = 1.0):
        self.cum = list(itertools.accumulate(1.0 / (r + 1) ** s for r in range(n)))

    def __call__(self, rng: random.Random) -> int:
        return bisect.bisect_left(self.cum, rng.random() * self.cum[-1])


def _plural_en(w: str) -> str:
    return w + "es" if w.endswith(("s", "x", "ch", "sh")) else w + "s"


def _plural_fr(w: str) -> str:
    if w.endswith(("s", "x")):
        return w
    return w + "x" if w.endswith("eau") else w + "s"


def _adj_fr(a: Adjective, gender: str, number: str) -> str:
    w = a.fr
    if gender == "f" and w.endswith(("en", "on", "el")):  # européen → européenne, bon → bonne
        w += w[-1] + "e"
    elif gender == "f" and not w.endswith("e"):
        w += "e"
    return _plural_fr(w) if number == "pl" else w


def _elides(word: str) -> bool:
    return word[0].lower() in _VOWELS or word[0].lower() == "h"


class Grammar:
    """Generates aligned (English tokens, French tokens) pairs. French elision is done at detokenization."""

    def __init__(self, lex: Lexicon, zipf: float = 1.0):
        self.lex = lex
        self.noun_rank = _Zipf(len(lex.nouns), zipf)
        self.adj_rank = _Zipf(len(lex.adjectives), zipf)
        self.verb_rank = _Zipf(len(lex.verbs), zipf)
        self.name_rank = _Zipf(len(lex.names), zipf)

    # Every method returns English tokens, French tokens and the gold word alignment between them:
    # links (i, j, sure) between English token i and French token j (0-based), sure=False for a possible link.
    # Noun phrases also return their number, "sg" | "pl".
    def noun_phrase(self, rng: random.Random, depth: int = 0) -> tuple[list[str], list[str], Links, str]:
        if rng.random() < 0.08:
            name = self.lex.names[self.name_rank(rng)]
            return [name], [name], [(0, 0, True)], "sg"
        noun = self.lex.nouns[self.noun_rank(rng)]
        number = "pl" if rng.random() < 0.3 else "sg"
        if number == "sg":
            det_en = rng.choice(("the", "the", "the", "a", "this", "my"))
            det_fr = _DETS_SG[det_en][noun.gender == "f"]
        else:
            det_en = rng.choice(("the", "the", "some", "these", "my"))
            det_fr = _DETS_PL[det_en]
        n_adj = min(3, int(rng.expovariate(1.6)))
        adjs = [self.lex.adjectives[self.adj_rank(rng)] for _ in range(n_adj)]
        head_en = list(noun.en[:-1]) + [_plural_en(noun.en[-1]) if number == "pl" else noun.en[-1]]
        head_fr = [_plural_fr(noun.fr[0]) if number == "pl" else noun.fr[0]] + list(noun.fr[1:])
        en_det = [] if det_en == "some" and rng.random() < 0.5 else [det_en]
        en = en_det + [a.en for a in adjs] + head_en
        before = [k for k, a in enumerate(adjs) if a.before]
        after = [k for k, a in reversed(list(enumerate(adjs))) if not a.before]
        fr = [det_fr] + [_adj_fr(adjs[k], noun.gender, number) for k in before] + head_fr + \
            [_adj_fr(adjs[k], noun.gender, number) for k in after]
        d = len(en_det)  # English: [det] adjectives head; French: det before-adjectives head after-adjectives
        links: Links = [(0, 0, True)] if en_det else []
        links += [(d + k, 1 + p, True) for p, k in enumerate(before)]
        links += [(d + k, 1 + len(before) + len(head_fr) + p, True) for p, k in enumerate(after)]
        h_en, h_fr = d + len(adjs), 1 + len(before)
        for i in range(len(head_en)):  # compound → one word, one word → "N de N" ("de" a possible link)
            links += [(h_en + i, h_fr + j, head_fr[j] != "de" or len(head_fr) == 1) for j in range(len(head_fr))]
        if depth == 0 and rng.random() < 0.15:  # "of the N": de + le → du, de + les → des
            pp_en, pp_fr, pp_links, _ = self.noun_phrase(rng, depth + 1)
            en, fr, links = _attach(en, fr, links, "of", "de", pp_en, pp_fr, pp_links)
        return en, fr, links, number

    def verb_phrase(self, rng: random.Random, number: str) -> tuple[list[str], list[str], Links]:
        verb = self.lex.verbs[self.verb_rank(rng)]
        tense = rng.choice(("present", "present", "past", "future"))
        negated = rng.random() < 0.15
        fr_present = {"sg": "e", "pl": "ent", "we": "ons"}[number]
        en_present = verb.en + "s" if number == "sg" else verb.en
        if tense == "present":
            en = [("does" if number == "sg" else "do"), "not", verb.en] if negated else [en_present]
            fr_verb = [verb.fr + fr_present]
        elif tense == "past":  # one-to-many: walked → a marché
            en = ["did", "not", verb.en] if negated else [verb.en + ("d" if verb.en.endswith("e") else "ed")]
            aux = {"sg": "a", "pl": "ont", "we": "avons"}[number]
            fr_verb = [aux, "pas", verb.fr + "é"] if negated else [aux, verb.fr + "é"]
        else:  # many-to-one: will walk → marchera
            en = ["will", "not", verb.en] if negated else ["will", verb.en]
            fr_verb = [verb.fr + {"sg": "era", "pl": "eront", "we": "erons"}[number]]
        if negated:
            fr = ["ne"] + fr_verb + ([] if tense == "past" else ["pas"])
        else:
            fr = fr_verb
        return en, fr, _verb_links(en, fr, tense, negated)

    def clause(self, rng: random.Random) -> tuple[list[str], list[str], Links]:
        if rng.random() < 0.2:
            pron = rng.choice(list(_PRONOUNS))
            pron_fr, number = _PRONOUNS[pron]
            en, fr, links = [pron], [pron_fr], [(0, 0, True)]
        else:
            en, fr, links, number = self.noun_phrase(rng)
            if rng.random() < 0.15:  # relative clause: the verb inside agrees with the subject
                rel = self.verb_phrase(rng, number)
                obj_en, obj_fr, obj_links, _ = self.noun_phrase(rng, 1)
                en, fr, links = _concat((en, fr, links), (["which"], ["qui"], [(0, 0, True)]), rel,
                                        (obj_en, obj_fr, obj_links))
        en, fr, links = _concat((en, fr, links), self.verb_phrase(rng, number))
        if rng.random() < 0.85:
            obj_en, obj_fr, obj_links, _ = self.noun_phrase(rng)
            en, fr, links = _concat((en, fr, links), (obj_en, obj_fr, obj_links))
        while rng.random() < 0.35:
            prep = rng.choice(list(_PREPS))
            pp_en, pp_fr, pp_links, _ = self.noun_phrase(rng, 1)
            en, fr, links = _attach(en, fr, links, prep, _PREPS[prep], pp_en, pp_fr, pp_links)
        return en, fr, links

    def fragment(self, rng: random.Random, target: int) -> tuple[list[str], list[str], Links]:
        if target <= 1:
            en, fr = rng.choice(((["yes"], ["oui"]), (["no"], ["non"]), (["thanks"], ["merci"]),
                                 ([n := self.lex.names[self.name_rank(rng)]], [n])))
            return en, fr, [(0, 0, True)]
        en, fr, links, _ = self.noun_phrase(rng)
        return en, fr, links

    def sentence(self, rng: random.Random, target: int) -> tuple[list[str], list[str], Links]:
        """A sentence pair whose source length is close to `target` tokens (punctuation included)."""
        stop = (["."], ["."], [(0, 0, True)])
        if target <= 4:
            pair = self.fragment(rng, target)
            return _concat(pair, stop) if target > 1 and rng.random() < 0.5 else pair
        pair = self.clause(rng)
        while len(pair[0]) + 1 < target:
            conj = rng.choice(list(_CONJ))
            nxt = self.clause(rng)
            comma = [([","], [","], [(0, 0, True)])] if rng.random() < 0.5 else []
            conj_links = [(0, j, True) for j in range(len(_CONJ[conj]))]  # because → parce que
            pair = _concat(pair, *comma, ([conj], _CONJ[conj], conj_links), nxt)
        return _concat(pair, stop)


Links = list[tuple[int, int, bool]]


def _concat(*parts: tuple[list[str], list[str], Links]) -> tuple[list[str], list[str], Links]:
    """Concatenate aligned pieces, shifting each piece's links by the lengths before it."""
    en, fr, links = [], [], []
    for p_en, p_fr, p_links in parts:
        links += [(i + len(en), j + len(fr), sure) for i, j, sure in p_links]
        en, fr = en + p_en, fr + p_fr
    return en, fr, links


def _attach(en, fr, links, prep_en: str, prep_fr: str, pp_en, pp_fr, pp_links):
    """Append "prep NP", contracting the French preposition with the NP's article (de le → du): the contracted
    word is aligned to both the preposition and the English article."""
    merged = _contract(prep_fr, pp_fr)
    if len(merged) == len(pp_fr):  # contracted: merged[0] stands for prep_fr + pp_fr[0]
        return _concat((en, fr, links), ([prep_en] + pp_en, merged, [(0, 0, True)] + [(i + 1, j, s) for i, j, s in pp_links]))
    return _concat((en, fr, links), ([prep_en], [prep_fr], [(0, 0, True)]), (pp_en, pp_fr, pp_links))


def _verb_links(en: list[str], fr: list[str], tense: str, negated: bool) -> Links:
    """walks → marche; walked → a marché; will walk → marchera; does not walk → ne marche pas (does ~ marche
    possible); did not walk → n'a pas marché; will not walk → ne marchera pas."""
    if not negated:
        return [(i, j, True) for i in range(len(en)) for j in range(len(fr))]  # 1-1, 1-2 or 2-1
    not_links = [(1, 0, True), (1, fr.index("pas"), True)]  # not → ne … pas
    if tense == "present":  # does not walk → ne marche pas
        return not_links + [(2, 1, True), (0, 1, False)]
    if tense == "past":  # did not walk → ne a pas marché
        return not_links + [(0, 1, True), (2, 3, True)]
    return not_links + [(0, 1, True), (2, 1, True)]  # will not walk → ne marchera pas


def _contract(prep: str, np_fr: list[str]) -> list[str]:
    """French preposition + article contraction: de le → du, de les → des, à le → au, à les → aux."""
    table = {("de", "le"): "du", ("de", "les"): "des", ("de", "des"): "de",
             ("à", "le"): "au", ("à", "les"): "aux"}
    if np_fr and (prep, np_fr[0]) in table:
        return [table[(prep, np_fr[0])]] + np_fr[1:]
    return [prep] + np_fr


# --------------------------------------------------------------------------------------------- raw text

def detokenize_en(tokens: list[str]) -> str:
    text = " ".join(tokens)
    for p in (" .", " ,"):
        text = text.replace(p, p[1:])
    return text[:1].upper() + text[1:]


def detokenize_fr(tokens: list[str]) -> str:
    """French raw text: elision (le arbre → l'arbre, ne aime → n'aime, que il → qu'il), capitalisation."""
    out: list[str] = []
    for tok in tokens:
        if out and out[-1] in ("le", "la", "ne", "de", "que") and tok[:1].lower() in _VOWELS | {"h"}:
            out[-1] = out[-1][:-1] + "'"
        out.append(tok)
    text = ""
    for tok in out:
        if not text:
            text = tok
        elif tok in (".", ","):
            text += tok
        elif text.endswith("'"):
            text += tok
        else:
            text += " " + tok
    return text[:1].upper() + text[1:]


# --------------------------------------------------------------------------------------------- corpus

def _train_length(rng: random.Random, max_len: int) -> int:
    """Source lengths: news-like (log-normal, median ≈ 18 tokens) for 3 sentences in 4, uniform over
    1..max_len for the rest, so that long sentences are not too rare to learn from in a short training."""
    if rng.random() < 0.25:
        return rng.randint(1, max_len)
    return max(1, min(max_len, int(round(math.exp(rng.gauss(math.log(18.0), 0.6))))))


def generate(seed: int, n_train: int, n_dev: int, n_test: int, n_nouns: int, n_adjectives: int,
             n_verbs: int, n_names: int, max_len: int, zipf: float = 1.0) -> dict[str, list]:
    """Return {"train", "dev", "test"} lists of raw (English, French) sentence pairs, and under "test_links"
    the gold word alignment of each test pair (links between tokens of the Moses-tokenized sentences).

    train/dev lengths follow a news-like distribution; test lengths are uniform over 1..max_len so that
    every length bucket of Figure 2 holds enough sentences. Test and dev sources never occur in train.
    Word ranks follow a Zipf law with exponent `zipf`: larger values concentrate the text on fewer words.
    """
    rng = random.Random(seed)
    grammar = Grammar(Lexicon.generate(rng, n_nouns, n_adjectives, n_verbs, n_names), zipf)

    def pairs(n: int, length, exclude: set[str], tolerance: int | None = None) -> tuple[list[tuple[str, str]], list]:
        """n new pairs and their links; with `tolerance`, a pair is kept only if its length is that close to the
        drawn target."""
        out, links, seen = [], [], set(exclude)
        while len(out) < n:
            target = length()
            en, fr, pair_links = grammar.sentence(rng, target)
            if tolerance is not None and abs(len(en) - target) > tolerance:
                continue
            pair = (detokenize_en(en), detokenize_fr(fr))
            if pair[0] not in seen:
                seen.add(pair[0])
                out.append(pair)
                links.append(sorted(pair_links))
        return out, links

    test, test_links = pairs(n_test, lambda: rng.randint(1, max_len), set(), tolerance=2)
    dev, _ = pairs(n_dev, lambda: _train_length(rng, max_len), {en for en, _ in test})
    held_out = {en for en, _ in test} | {en for en, _ in dev}
    train, _ = pairs(n_train, lambda: _train_length(rng, max_len + 20), held_out)
    return {"train": train, "dev": dev, "test": test, "test_links": test_links}


def write_corpus(corpus: dict[str, list], out_dir, src: str = "en", tgt: str = "fr") -> None:
    """`{split}.{src}` and `{split}.{tgt}` raw text, and `test.align`: the test set's gold alignment in the
    NAACL 2003 format, one link per line, "sentence source-position target-position S|P", all 1-based."""
    for split in ("train", "dev", "test"):
        write_lines_atomic(f"{out_dir}/{split}.{src}", [en for en, _ in corpus[split]])
        write_lines_atomic(f"{out_dir}/{split}.{tgt}", [fr for _, fr in corpus[split]])
    write_lines_atomic(f"{out_dir}/test.align", [f"{k} {i + 1} {j + 1} {'S' if sure else 'P'}"
                                                 for k, links in enumerate(corpus["test_links"], 1)
                                                 for i, j, sure in links])
    write_json_atomic(f"{out_dir}/corpus.json", {split: {
        "lines": len(corpus[split]), "pairs": len(corpus[split]),
        "src_words": sum(len(en.split()) for en, _ in corpus[split]),
        "tgt_words": sum(len(fr.split()) for _, fr in corpus[split])} for split in ("train", "dev", "test")})


def corpus(data: dict, seed: int, fetched: str | None, out_dir: str) -> None:
    """Stage 1 for `data.source: synthetic`: the corpus of `data.synthetic`'s sizes, generated from `seed`."""
    s = data["synthetic"]
    write_corpus(generate(seed, s["n_train"], s["n_dev"], s["n_test"], s["nouns"], s["adjectives"], s["verbs"],
                          s["names"], s["max_len"], s["zipf"]), out_dir)


def _check(data: dict) -> list[str]:
    pair = (data["src"], data["tgt"])
    return [] if pair == ("en", "fr") else [
        f"'data.src', 'data.tgt': data.source synthetic generates English-like to French-like text, en-fr only, got "
        f"{pair[0]}-{pair[1]} (data.source local takes your own languages)"]


def _at_least(low: int) -> dict:
    return {"type": "integer", "minimum": low}


SOURCE = Source("synthetic", corpus, section(
    "sizes of the generated corpus and of its lexicon", n_train=_at_least(1), n_dev=_at_least(1),
    n_test=_at_least(1), nouns=_at_least(10), adjectives=_at_least(10), verbs=_at_least(10), names=_at_least(10),
    max_len={**_at_least(5), "description": "test lengths are uniform over 1..max_len"},
    zipf={"type": "number", "exclusiveMinimum": 0, "description": "exponent of the Zipf law over word ranks"}),
    check=_check, gold_links=True)
