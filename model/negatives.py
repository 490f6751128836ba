"""Hard-negative captions from a caption's scene graph (its ``scene_graphs`` rows, or the parser's ``Concept``\\ s via
``concept_rows``): NegCLIP-style swaps and CE-CLIP-style replacements, each kind made or given a reason why not.

**NegCLIP** (Yuksekgonul et al., ICLR 2023) swaps two constituents of the same kind within the caption: noun
phrases, nouns, adjectives, adverbs, verb phrases. What our parse supports (``NEGCLIP_KINDS``):
- ``relation_swap``: a relation's subject and object noun phrases exchanged (each object's head noun with the
  attributes written before it: "a brown horse riding a man");
- ``noun_swap``: the head nouns of two objects exchanged (their attributes stay where they are);
- ``attribute_swap``: two attributes bound to different objects exchanged (NegCLIP's adjective swap; our
  attributes also hold numbers and noun modifiers, "two", "park": a number is exchanged with a number only);
- ``relation_word_swap``: the predicate words of two relations exchanged ("man next to horse riding fence"), the
  nearest our parse comes to a verb-phrase swap.
Not supported: **adverb** swaps (the parse keeps no adverbs: a concept is an object, an attribute or a relation)
and **verb-phrase** swaps proper (a relation holds its predicate words and its two heads, not the verb phrase
with its arguments and modifiers); noun phrases are a head with its attributes before it (a determiner,
a post-head modifier or a clause stays in place).

**CE-CLIP** (Zhang et al., CVPR 2024) gives each caption a fixed set of typed negatives with a validity mask
(``CE_CLIP_KINDS``, one slot each, ``slots``): a swap of two nouns (``noun_swap``, preferring a relation's subject
and object) and a replacement of one relation (``relation_replace``), attribute (``attribute_replace``) and object
(``object_replace``) by another of the same kind from a ``Vocabulary`` of the training captions' scene graphs (an
attribute by one of the same sort: a number by a number). Their code fills a masked word with a masked language
model instead; the issue asks for the vocabulary, which needs no model. Replacements are drawn with a generator
seeded by (seed, caption id, kind): the same inputs give the same negatives. No agreement in number is made ("two
dogs" may become "two horse").

A kind that cannot be made has a reason (``REASONS``); a caption with none has one too (``CaptionNegatives.reason``),
and ``summary`` counts them: no caption is ever treated as having a negative it lacks.
"""
from __future__ import annotations

import dataclasses
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

NEGCLIP_KINDS = ("relation_swap", "noun_swap", "attribute_swap", "relation_word_swap")
CE_CLIP_KINDS = ("noun_swap", "relation_replace", "attribute_replace", "object_replace")
STYLES = {"negclip": NEGCLIP_KINDS, "ce-clip": CE_CLIP_KINDS}
REASONS = {
    "no_objects": "the parse found no object in the caption",
    "no_relation": "no relation with both its subject and object known",
    "fewer_than_two_objects": "fewer than two objects",
    "fewer_than_two_relations": "fewer than two relations",
    "no_attribute": "no attribute",
    "attributes_on_fewer_than_two_objects": "no two attributes of one sort (numbers, words) on different objects",
    "overlapping_spans": "the two spans to exchange overlap",
    "same_text": "every candidate edit gives the caption back (the same words)",
    "no_alternative": "the vocabulary has no other word of this kind",
}
NUMBER_WORDS = {"one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
                "a few", "several", "many", "both", "single", "couple"}


def concept_rows(concepts) -> list[dict]:
    """The parser's ``Concept`` records as ``scene_graphs``-like rows (the dict form the functions here read)."""
    return [{k: v for k, v in dataclasses.asdict(c).items() if k != "tokens"} for c in concepts]


def _edit(caption: str, edits: list[tuple[int, int, str]]) -> str:
    """``caption`` with each (start, end) span replaced by its text (spans do not overlap)."""
    out, at = [], 0
    for s, e, text in sorted(edits):
        out += [caption[at:s], text]
        at = e
    return "".join(out + [caption[at:]])


def _cased(new: str, old: str) -> str:
    return new[:1].upper() + new[1:] if old[:1].isupper() else new


def _swap(caption: str, a: tuple[int, int], b: tuple[int, int]) -> str | None:
    """The caption with spans a and b exchanged (a capital at the caption's start stays there); None if they
    overlap."""
    (a0, a1), (b0, b1) = sorted([a, b])
    if b0 < a1:
        return None
    first, second = caption[a0:a1], caption[b0:b1]
    if a0 == 0 and first[:1].isupper() and not second[:1].isupper():
        first, second = first[:1].lower() + first[1:], _cased(second, first)
    return _edit(caption, [(a0, a1, second), (b0, b1, first)])


def _pick(caption: str, candidates: list[tuple[tuple[int, int], tuple[int, int]]], rng: random.Random,
          empty: str) -> tuple[str | None, str]:
    """One of the candidate swaps (tried in random order) that changes the caption: (negative, "") or (None,
    reason): ``empty`` when there is no candidate, else why none changed it."""
    if not candidates:
        return None, empty
    rng.shuffle(candidates)
    reason = "overlapping_spans"
    for a, b in candidates:
        neg = _swap(caption, a, b)
        if neg is not None and neg.lower() != caption.lower():
            return neg, ""
        if neg is not None:
            reason = "same_text"
    return None, reason


class _Graph:
    """A caption's scene graph rows, indexed."""

    def __init__(self, rows: list[dict]):
        self.by_id = {r["concept_id"]: r for r in rows}
        self.objects = [r for r in rows if r["kind"] == "object"]
        self.attributes = [r for r in rows if r["kind"] == "attribute" and r.get("object_id") in self.by_id]
        self.relations = [r for r in rows if r["kind"] == "relation"
                          and r.get("subject_id") in self.by_id and r.get("object_id") in self.by_id
                          and r["subject_id"] != r["object_id"]]

    @staticmethod
    def span(r: dict) -> tuple[int, int]:
        return r["char_start"], r["char_end"]

    def phrase_span(self, obj_id: int) -> tuple[int, int]:
        """An object's noun phrase: its head with the attributes written before it."""
        o = self.by_id[obj_id]
        starts = [a["char_start"] for a in self.attributes
                  if a["object_id"] == obj_id and a["char_start"] < o["char_start"]]
        return min(starts + [o["char_start"]]), o["char_end"]


def _relation_swap(caption: str, g: _Graph, rng: random.Random) -> tuple[str | None, str]:
    pairs = [(g.phrase_span(r["subject_id"]), g.phrase_span(r["object_id"])) for r in g.relations]
    return _pick(caption, pairs, rng, "no_relation")


def _noun_swap(caption: str, g: _Graph, rng: random.Random) -> tuple[str | None, str]:
    """Two objects' head nouns exchanged: a relation's subject and object first, else any two objects."""
    if len(g.objects) < 2:
        return None, "fewer_than_two_objects"
    related = [(g.span(g.by_id[r["subject_id"]]), g.span(g.by_id[r["object_id"]])) for r in g.relations]
    neg, _ = _pick(caption, related, rng, "no_relation")
    if neg is not None:
        return neg, ""
    pairs = [(g.span(a), g.span(b)) for i, a in enumerate(g.objects) for b in g.objects[i + 1:]]
    return _pick(caption, pairs, rng, "fewer_than_two_objects")


def _attribute_swap(caption: str, g: _Graph, rng: random.Random) -> tuple[str | None, str]:
    if not g.attributes:
        return None, "no_attribute"
    pairs = [(g.span(a), g.span(b)) for i, a in enumerate(g.attributes) for b in g.attributes[i + 1:]
             if a["object_id"] != b["object_id"] and _is_number(a["text"]) == _is_number(b["text"])]
    return _pick(caption, pairs, rng, "attributes_on_fewer_than_two_objects")


def _relation_word_swap(caption: str, g: _Graph, rng: random.Random) -> tuple[str | None, str]:
    pairs = [(g.span(a), g.span(b)) for i, a in enumerate(g.relations) for b in g.relations[i + 1:]]
    return _pick(caption, pairs, rng, "fewer_than_two_relations")


@dataclass(frozen=True)
class Vocabulary:
    """The distinct words of each kind in the training captions' scene graphs (lower case, sorted)."""
    relation: tuple[str, ...] = ()
    attribute: tuple[str, ...] = ()
    object: tuple[str, ...] = ()


def build_vocabulary(graphs: Iterable[list[dict]], min_count: int = 1) -> Vocabulary:
    """The vocabulary of the given captions' scene graphs: the words of each kind seen in >= ``min_count`` captions."""
    counts: dict[str, Counter] = {k: Counter() for k in ("relation", "attribute", "object")}
    for rows in graphs:
        for kind, words in ((k, {r["text"].lower() for r in rows if r["kind"] == k}) for k in counts):
            counts[kind].update(words)
    return Vocabulary(**{k: tuple(sorted(w for w, n in c.items() if n >= min_count)) for k, c in counts.items()})


def _is_number(word: str) -> bool:
    return word.lower() in NUMBER_WORDS or word.replace(",", "").isdigit()


def _replace(kind: str, caption: str, g: _Graph, vocab: Vocabulary, rng: random.Random) -> tuple[str | None, str]:
    """One concept of ``kind`` replaced by another word of its kind from the vocabulary."""
    concepts = {"relation": g.relations, "attribute": g.attributes, "object": g.objects}[kind]
    if not concepts:
        return None, {"relation": "no_relation", "attribute": "no_attribute", "object": "no_objects"}[kind]
    target = rng.choice(concepts)
    old = caption[target["char_start"]:target["char_end"]]
    words = [w for w in getattr(vocab, kind) if w != old.lower()
             and (kind != "attribute" or _is_number(w) == _is_number(old))]
    if not words:
        return None, "no_alternative"
    return _edit(caption, [(*g.span(target), _cased(rng.choice(words), old))]), ""


MAKERS = {"relation_swap": _relation_swap, "noun_swap": _noun_swap, "attribute_swap": _attribute_swap,
          "relation_word_swap": _relation_word_swap}


@dataclass
class CaptionNegatives:
    """One caption's negatives by kind, and for each kind not made, why."""
    caption_id: int
    negatives: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def reason(self) -> str | None:
        """Why the caption has no negative at all (None when it has one)."""
        if self.negatives:
            return None
        return "no_objects" if "no_objects" in self.missing.values() else "no_applicable_edit"

    def distinct(self) -> list[str]:
        """The different negative captions, in the kinds' order (two kinds can give the same text)."""
        return list(dict.fromkeys(self.negatives.values()))

    def slots(self, kinds: tuple[str, ...] = CE_CLIP_KINDS) -> tuple[list[str | None], list[bool]]:
        """One slot per kind: its negative (None if missing) and the validity mask CE-CLIP's loss reads."""
        texts = [self.negatives.get(k) for k in kinds]
        return texts, [t is not None for t in texts]


def caption_negatives(caption_id: int, caption: str, rows: list[dict], *, style: str = "negclip",
                      vocabulary: Vocabulary | None = None, seed: int = 0) -> CaptionNegatives:
    """The negatives of one caption from its scene graph rows, every kind of ``style`` made or given a reason."""
    if style not in STYLES:
        raise ValueError(f"unknown negatives style {style!r} (choose {', '.join(STYLES)})")
    if style == "ce-clip" and vocabulary is None:
        raise ValueError("style 'ce-clip' needs a vocabulary (build_vocabulary of the training captions)")
    g = _Graph(rows)
    out = CaptionNegatives(caption_id)
    for kind in STYLES[style]:
        if not g.objects:
            out.missing[kind] = "no_objects"
            continue
        rng = random.Random(f"{seed}:{caption_id}:{kind}")
        if kind in MAKERS:
            neg, reason = MAKERS[kind](caption, g, rng)
        else:
            neg, reason = _replace(kind.removesuffix("_replace"), caption, g, vocabulary, rng)
        if neg is None:
            out.missing[kind] = reason
        else:
            out.negatives[kind] = neg
    return out


@dataclass
class NegativesResult:
    results: list[CaptionNegatives]
    kinds: tuple[str, ...]

    def summary(self) -> dict:
        """Counts: captions with / without a negative (the latter by reason), each kind made, each kind missing
        by reason."""
        without = Counter(r.reason for r in self.results if r.reason is not None)
        missing = {k: dict(sorted(Counter(r.missing[k] for r in self.results if k in r.missing).items()))
                   for k in self.kinds}
        return {"captions": len(self.results), "with_negatives": len(self.results) - sum(without.values()),
                "without_negatives": sum(without.values()), "without_negatives_by_reason": dict(sorted(without.items())),
                "made": {k: sum(k in r.negatives for r in self.results) for k in self.kinds}, "missing": missing}


def make_negatives(captions: list[dict], rows: list[dict], *, style: str = "negclip",
                   vocabulary: Vocabulary | None = None, seed: int = 0) -> NegativesResult:
    """Negatives for caption rows ({caption_id, caption}) from ``scene_graphs`` rows; style 'ce-clip' without a
    vocabulary takes the vocabulary of these captions' own graphs (for a training set: its training captions)."""
    if style not in STYLES:
        raise ValueError(f"unknown negatives style {style!r} (choose {', '.join(STYLES)})")
    by_caption: dict[int, list[dict]] = {}
    for r in rows:
        by_caption.setdefault(r["caption_id"], []).append(r)
    if style == "ce-clip" and vocabulary is None:
        vocabulary = build_vocabulary(by_caption.values())
    results = [caption_negatives(c["caption_id"], c["caption"], by_caption.get(c["caption_id"], []), style=style,
                                 vocabulary=vocabulary, seed=seed) for c in captions]
    return NegativesResult(results, STYLES[style])
