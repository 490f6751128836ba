"""model/negatives.py on real parses (the rule parser, as the parse stage writes its ``scene_graphs`` rows)."""
from __future__ import annotations

import pytest

from model.negatives import (CE_CLIP_KINDS, NEGCLIP_KINDS, REASONS, build_vocabulary, caption_negatives,
                                concept_rows, make_negatives)
from pipeline.scene_graph import load_nlp, parse_captions, parse_doc

CAPTIONS = ["A small red circle is to the right of a big blue hexagon.",
            "a man riding a brown horse next to a white fence",
            "two black and white dogs near three cats",
            "Dogs near a cat",
            "a dog next to a dog",
            "a dog",
            "!!!"]  # the parse finds no object here


@pytest.fixture(scope="module")
def parsed():
    nlp = load_nlp()
    captions = [{"caption_id": 10 + i, "caption": c} for i, c in enumerate(CAPTIONS)]
    return captions, parse_captions(captions, nlp).rows, nlp


def _one(parsed, caption_id, **kw):
    captions, rows, _ = parsed
    text = next(c["caption"] for c in captions if c["caption_id"] == caption_id)
    return caption_negatives(caption_id, text, [r for r in rows if r["caption_id"] == caption_id], **kw)


def test_negclip_swaps_of_a_parsed_caption(parsed):
    out = _one(parsed, 10)
    assert out.negatives["relation_swap"] == "A big blue hexagon is to the right of a small red circle."
    assert out.negatives["noun_swap"] == "A small red hexagon is to the right of a big blue circle."
    assert out.negatives["attribute_swap"] in {
        "A big red circle is to the right of a small blue hexagon.",
        "A blue red circle is to the right of a big small hexagon.",
        "A small big circle is to the right of a red blue hexagon.",
        "A small blue circle is to the right of a big red hexagon."}
    assert out.missing == {"relation_word_swap": "fewer_than_two_relations"} and out.reason is None
    two = _one(parsed, 11)
    assert two.negatives["relation_word_swap"] == "a man next to a brown horse riding a white fence"
    assert two.negatives["attribute_swap"] == "a man riding a white horse next to a brown fence"
    # numbers swap with numbers only: "two" and "three", never "two" and "black"
    assert _one(parsed, 12).negatives["attribute_swap"] == "three black and white dogs near two cats"
    assert _one(parsed, 13).negatives["noun_swap"] == "Cat near a dogs"  # the capital stays at the start


def test_captions_without_a_negative_are_counted_with_their_reason(parsed):
    captions, rows, _ = parsed
    result = make_negatives(captions, rows, style="negclip")
    by_id = {r.caption_id: r for r in result.results}
    assert by_id[14].missing["noun_swap"] == "same_text" and by_id[14].missing["relation_swap"] == "same_text"
    assert by_id[14].reason == "no_applicable_edit" and by_id[14].negatives == {}
    assert by_id[15].missing == {"relation_swap": "no_relation", "noun_swap": "fewer_than_two_objects",
                                 "attribute_swap": "no_attribute", "relation_word_swap": "fewer_than_two_relations"}
    assert by_id[16].reason == "no_objects" and set(by_id[16].missing.values()) == {"no_objects"}
    s = result.summary()
    assert s["captions"] == 7 and s["with_negatives"] == 4 and s["without_negatives"] == 3
    assert s["without_negatives_by_reason"] == {"no_applicable_edit": 2, "no_objects": 1}
    assert s["made"]["relation_swap"] == 4 and s["missing"]["relation_swap"] == {
        "no_objects": 1, "no_relation": 1, "same_text": 1}
    assert all(reason in REASONS for r in result.results for reason in r.missing.values())
    assert all(set(r.negatives) | set(r.missing) == set(NEGCLIP_KINDS) for r in result.results)


def test_ce_clip_replacements_come_from_the_vocabulary_and_are_deterministic(parsed):
    captions, rows, nlp = parsed
    vocab = build_vocabulary([concept_rows(parse_doc(nlp(c))) for c in CAPTIONS])
    assert vocab.relation == ("near", "next to", "riding", "to the right of")
    assert "two" in vocab.attribute and "hexagon" in vocab.object
    first = make_negatives(captions, rows, style="ce-clip", vocabulary=vocab, seed=5)
    again = make_negatives(captions, rows, style="ce-clip", vocabulary=vocab, seed=5)
    assert [r.negatives for r in first.results] == [r.negatives for r in again.results]
    others = [make_negatives(captions, rows, style="ce-clip", vocabulary=vocab, seed=s) for s in range(6)]
    assert len({str([r.negatives for r in o.results]) for o in others}) > 1  # the seed draws the replacements
    out = next(r for r in first.results if r.caption_id == 10)
    rel = out.negatives["relation_replace"]
    assert rel in {f"A small red circle is {w} a big blue hexagon." for w in ("near", "next to", "riding")}
    changed = [(a, b) for a, b in zip(CAPTIONS[0].split(), out.negatives["attribute_replace"].split()) if a != b]
    assert len(changed) == 1 and changed[0][0] in {"small", "red", "big", "blue"}
    assert changed[0][1] in set(vocab.attribute) - {"two", "three"}
    numbers = next(r for r in first.results if r.caption_id == 12)
    # a number is replaced by a number, a word by a word
    assert numbers.negatives["attribute_replace"].split()[0] in {"two", "three"}
    texts, mask = out.slots()
    assert texts == [out.negatives[k] for k in CE_CLIP_KINDS] and mask == [True] * 4
    lone = next(r for r in first.results if r.caption_id == 15)
    texts, mask = lone.slots()
    assert mask == [False, False, False, True] and texts[:3] == [None] * 3
    assert lone.negatives["object_replace"].split()[1] in set(vocab.object) - {"dog"}
    assert first.summary()["without_negatives_by_reason"] == {"no_objects": 1}


def test_the_vocabulary_default_and_the_refusals(parsed):
    captions, rows, _ = parsed
    own = make_negatives(captions, rows, style="ce-clip", seed=1)  # the captions' own vocabulary
    assert own.summary()["made"]["object_replace"] == 6
    with pytest.raises(ValueError, match="unknown negatives style 'bows'"):
        make_negatives(captions, rows, style="bows")
    with pytest.raises(ValueError, match="needs a vocabulary"):
        caption_negatives(1, "a dog", [], style="ce-clip")
    lone_vocab = build_vocabulary([[{"kind": "object", "text": "Dog"}]])
    out = caption_negatives(15, "a dog", [r for r in rows if r["caption_id"] == 15], style="ce-clip",
                            vocabulary=lone_vocab)
    assert out.missing["object_replace"] == "no_alternative" and out.reason == "no_applicable_edit"
