"""model/probes_recon.py: the reconstruction probe's breakdown (direction words vs filler, relation vs attribute) and
the captions' image-free baseline (a frequency baseline from the training captions)."""
from __future__ import annotations

from model.probes_recon import breakdown, caption_baseline, direction_classes, masked_positions

LEFT, RIGHT, ABOVE, OVER, TO, THE, OF, RED = 1, 2, 3, 4, 10, 11, 12, 20


def row(ids: list[int], relation: list[int], attribute: list[int] = ()) -> dict:
    return {"token_ids": ids, "relation_idx": list(relation), "attribute_idx": list(attribute)}


def test_spans_and_their_context():
    r = row([0, 30, TO, THE, LEFT, OF, 31, 9], [2, 3, 4, 5], [1])
    got = masked_positions(r)
    assert ("relation", 4, 4, 2, 30, 31) in got  # "left": 3rd of a 4-token span between 30 and 31
    assert ("attribute", 1, 1, 0, 0, TO) in got


def test_the_caption_baseline_predicts_the_commonest_word_of_the_context_backing_off():
    train = [row([0, 5, TO, THE, LEFT, OF, 6], [2, 3, 4, 5]), row([0, 5, TO, THE, LEFT, OF, 6], [2, 3, 4, 5]),
             row([0, 5, TO, THE, RIGHT, OF, 6], [2, 3, 4, 5])]
    held = [row([0, 5, TO, THE, RIGHT, OF, 6], [2, 3, 4, 5]), row([0, 7, TO, THE, RIGHT, OF, 8], [2, 3, 4, 5])]
    recs = caption_baseline(train, held)
    # filler read from the context exactly; the direction word is the commonest one ("left"), wrong both times
    assert [(t, p) for _, t, p in recs] == [(TO, TO), (THE, THE), (RIGHT, LEFT), (OF, OF)] * 2


def test_direction_words_count_by_direction_synonyms_merged():
    classes = {LEFT: "left", RIGHT: "right", ABOVE: "above", OVER: "above"}
    res = breakdown([("relation", ABOVE, OVER), ("relation", LEFT, RIGHT), ("relation", TO, TO),
                     ("relation", THE, OF), ("attribute", RED, RED)], classes)
    assert (res["direction_acc"], res["direction_n"]) == (0.5, 2)  # "over" for "above" is right
    assert (res["filler_acc"], res["filler_n"]) == (0.5, 2)
    assert (res["relation_acc"], res["relation_n"]) == (0.25, 4) and res["attribute_acc"] == 1.0


def test_the_worlds_direction_words_are_one_piece_each():
    from open_clip.tokenizer import SimpleTokenizer

    classes = direction_classes(SimpleTokenizer().encode)
    assert sorted(set(classes.values())) == ["above", "below", "left", "right"] and len(classes) == 7
