"""The lexicon of the embedded language pair (`rnnsearch.data.corpus.synthetic`): invented word forms drawn from
each language's syllables, never repeating and never clashing with the closed-class words of the grammar."""

from __future__ import annotations

import random
from dataclasses import dataclass

_EN_ONSETS = "b bl br c ch cl cr d dr f fl fr g gl gr h j k l m n p pl pr qu r s sh sl sm sn sp st str t th tr v w wh z".split()
_EN_VOWELS = "a e i o u ai ea ee oo ou oa ie".split()
_EN_CODAS = ["", "", "b", "ck", "d", "ft", "g", "k", "l", "ll", "m", "n", "nd", "ng", "nk", "nt", "p", "r", "rd", "rn", "rt", "st", "t", "th"]
_FR_ONSETS = "b bl br c ch cl cr d dr f fl fr g gr j l m n p pl pr qu r s t tr v vr".split()
_FR_VOWELS = "a e é è i o ou au ai ei eu oi u an on in".split()
_FR_CODAS = ["", "", "", "n", "r", "l", "s", "t", "ll", "rt", "nt"]

# Closed-class words of the target language; generated forms must never collide with them.
_FR_FUNCTION = set(
    "le la l' les un une des ce cet cette ces mon ma mes de du à au aux dans sur avec pour sans après avant "
    "il elle ils elles nous ne n' pas a ont qui et mais parce que tandis bien oui non merci".split()
)
_EN_FUNCTION = set(
    "the a an some this these my of to in on with for without after before he she they we does do did not "
    "will walked which and but because while although yes no thanks is are".split()
)

@dataclass(frozen=True)
class Noun:
    en: tuple[str, ...]  # one word, or a two-word compound (many-to-one)
    fr: tuple[str, ...]  # one word, or "N de N" (one-to-many); the first word inflects
    gender: str  # "m" | "f"


@dataclass(frozen=True)
class Adjective:
    en: str
    fr: str
    before: bool  # French position: True for the few adjectives that precede the noun


@dataclass(frozen=True)
class Verb:
    en: str
    fr: str  # stem of a first-group verb: "march" → marche, marchent, marché, marchera


def _word(rng: random.Random, onsets, vowels, codas, syllables: int) -> str:
    parts = []
    for k in range(syllables):
        parts.append(rng.choice(onsets) if (k > 0 or rng.random() < 0.85) else "")
        parts.append(rng.choice(vowels))
        if k == syllables - 1 or rng.random() < 0.3:
            parts.append(rng.choice(codas))
    return "".join(parts)


class _Forms:
    """Draws fresh word forms that never repeat and never clash with closed-class words."""

    def __init__(self, rng: random.Random, onsets, vowels, codas, reserved: set[str]):
        self.rng, self.alphabet, self.used = rng, (onsets, vowels, codas), set(reserved)

    def new(self, min_len: int = 3) -> str:
        while True:
            w = _word(self.rng, *self.alphabet, syllables=self.rng.choice((1, 2, 2, 2, 3, 3)))
            # Reserve the inflected forms too, so e.g. a noun's plural never equals another word.
            variants = {w, w + "s", w + "e", w + "es", w + "d", w + "ed", w + "ent", w + "é", w + "era"}
            if len(w) >= min_len and not variants & self.used:
                self.used |= variants
                return w


@dataclass
class Lexicon:
    nouns: list[Noun]
    adjectives: list[Adjective]
    verbs: list[Verb]
    names: list[str]

    @classmethod
    def generate(cls, rng: random.Random, n_nouns: int, n_adjectives: int, n_verbs: int, n_names: int) -> "Lexicon":
        en = _Forms(rng, _EN_ONSETS, _EN_VOWELS, _EN_CODAS, _EN_FUNCTION)
        fr = _Forms(rng, _FR_ONSETS, _FR_VOWELS, _FR_CODAS, _FR_FUNCTION)
        nouns = []
        for _ in range(n_nouns):
            kind = rng.random()
            en_form = (en.new(), en.new()) if kind < 0.06 else (en.new(),)  # compound → one word
            fr_form = (fr.new(), "de", fr.new()) if 0.06 <= kind < 0.12 else (fr.new(),)  # one → "N de N"
            nouns.append(Noun(en_form, fr_form, rng.choice("mf")))
        adjectives = [Adjective(en.new(), fr.new(), before=rng.random() < 0.1) for _ in range(n_adjectives)]
        verbs = [Verb(en.new(), fr.new()) for _ in range(n_verbs)]
        names = []
        for _ in range(n_names):  # names are shared by both languages, so reserve them on both sides
            w = en.new(min_len=4)
            fr.used.add(w)
            names.append(w.capitalize())
        # Interleave kinds over frequency ranks so that rare words of every kind exist.
        rng.shuffle(nouns)
        return cls(nouns, adjectives, verbs, names)
