import pytest

from pipeline.scene_graph import Concept
from pipeline.tokens import align_caption, get_tokenizer, positions_for_span, token_mask_rows


@pytest.fixture(scope="module")
def tok():
    return get_tokenizer("ViT-B-32")


def pos(tok, caption, start, end):
    return positions_for_span(align_caption(tok, caption), start, end)


def test_reference_worked_example(tok):
    """A worked example of the official text-mask rule (hiker-lw/MACCO src/training/data_macco.py): riding,
    next to, brown -> {3, 5, 7, 8}; ids as the real tokenizer."""
    cap = "A man riding a brown horse next to the beach."
    al = align_caption(tok, cap)
    assert al.token_ids[:13] == [49406, 320, 786, 6765, 320, 2866, 4558, 1131, 531, 518, 2117, 269, 49407]
    assert al.token_ids == tok([cap])[0].tolist()
    got = set()
    for w in ("riding", "next to", "brown"):
        s = cap.index(w)
        got |= set(positions_for_span(al, s, s + len(w)))
    assert got == {3, 5, 7, 8}


def test_repeated_word_gets_its_own_occurrence(tok):
    cap = "a dog on a couch on a rug"
    second_on = cap.index("on", cap.index("couch"))
    assert pos(tok, cap, second_on, second_on + 2) == [6]
    assert pos(tok, cap, cap.index("on"), cap.index("on") + 2) == [3]


def test_punctuation_uppercase_and_multi_piece_words(tok):
    cap = "A RED, Skateboarding kangaroos!"
    al = align_caption(tok, cap)
    assert al.token_ids == tok([cap])[0].tolist()
    k = cap.index("kangaroos")
    ps = positions_for_span(al, k, k + len("kangaroos"))
    assert len(ps) >= 2 and ps == list(range(ps[0], ps[0] + len(ps)))  # several BPE pieces, contiguous
    r = cap.index("RED")
    assert positions_for_span(al, r, r + 3) == [2]  # the comma is its own token, not part of "red"
    assert positions_for_span(al, r, r + 3) != positions_for_span(al, r + 3, r + 4)


def test_substring_never_matches_inside_a_longer_word(tok):
    cap = "a reddish box next to a red box"
    red = cap.rindex("red")
    assert pos(tok, cap, red, red + 3) == [7]


def test_long_caption_truncates_like_open_clip(tok):
    cap = " ".join(["a red dog"] * 30) + " on a mat"
    al = align_caption(tok, cap)
    assert al.truncated and al.eot_idx == 76
    assert al.token_ids == tok([cap])[0].tolist()
    mat = cap.rindex("mat")
    assert positions_for_span(al, mat, mat + 3) == []  # cut off


def test_token_mask_rows_unmatched_and_errors(tok):
    cap = " ".join(["a red dog"] * 30) + " on a mat"
    graphs = {1: [Concept(0, "object", "dog", 6, 9), Concept(1, "attribute", "red", 2, 5, object_id=0),
                  Concept(2, "object", "mat", cap.rindex("mat"), cap.rindex("mat") + 3),
                  Concept(3, "relation", "on", cap.rindex("on"), cap.rindex("on") + 2, 0, 2)],
              2: [Concept(0, "object", "cafe", 0, 4)]}
    rows, errors = token_mask_rows([{"caption_id": 1, "caption": cap}, {"caption_id": 2, "caption": "caf&eacute;"}],
                                   graphs)
    r = rows[0]
    assert r["truncated"] and r["attribute_idx"] == [2] and r["object_idx"] == [3]
    assert r["relation_idx"] == [] and r["unmatched"] == ["object:mat", "relation:on"]
    assert [(e["item_id"], e["reason"]) for e in errors] == [("2", "token_alignment")]


def test_offsets_tokenization_equals_open_clip_on_many_captions(tok, world):
    import json

    from pipeline.parse_eval import load_gold
    from tests_support import DATA

    caps = [g["caption"] for g in load_gold(DATA / "gold_scene_graphs.txt")]
    caps += [a["caption"] for a in json.loads((world / "annotations" / "captions_val2014.json").read_text())
             ["annotations"]]
    caps += ["Tom's cat isn't on the mat...", "a   spaced\tcaption", "numbers 1,234 and 56th", "caf\u00e9 au lait"]
    for c in caps:
        assert align_caption(tok, c).token_ids == tok([c])[0].tolist(), c


@pytest.mark.parametrize("model", ["ViT-B-32", "ViT-B-16", "ViT-L-14", "macco-tiny"])
def test_standalone_tokenizer_equals_open_clip_get_tokenizer(model):
    """The tokenizer loaded without importing open_clip is the one open_clip.get_tokenizer builds."""
    import open_clip

    import model as _  # noqa: F401  (registers the tiny architectures)

    ours, theirs = get_tokenizer(model), open_clip.get_tokenizer(model)
    assert type(ours).__name__ == type(theirs).__name__ == "SimpleTokenizer"
    assert ours.context_length == theirs.context_length
    caps = ["A man riding a brown horse next to the beach.", "Two  dogs &amp; a CAT, on top of a sofa!!",
            "un café très chaud", "x" * 300]
    assert ours(caps).tolist() == theirs(caps).tolist()


def test_tokenizer_without_a_builtin_config_goes_through_open_clip():
    """No built-in JSON: open_clip.get_tokenizer decides (it falls back to its default SimpleTokenizer)."""
    import open_clip

    ours = get_tokenizer("not-an-arch")
    assert type(ours) is open_clip.tokenizer.SimpleTokenizer
    assert ours(["a dog"]).tolist() == open_clip.get_tokenizer("ViT-B-32")(["a dog"]).tolist()
