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


def test_a_name_without_a_builtin_config_is_refused():
    """open_clip's get_tokenizer falls back to the CLIP BPE for an unknown name with only a log warning: token
    masks for a SigLIP architecture (macco-siglip-demo, registered by model/, not by open_clip) would come out in
    the wrong tokenizer. Refused, saying where a SigLIP tokenizer comes from."""
    for name in ("not-an-arch", "macco-siglip-demo"):
        with pytest.raises(ValueError, match="no open_clip architecture of that name and not a local-dir"):
            get_tokenizer(name)


# ---- Hugging Face / SentencePiece tokenizers (SigLIP), from a local folder -----------------------------------
CORPUS = ["a small red circle left of a blue square", "the green triangle is above the yellow star",
          "a man riding a brown horse next to the beach", "two dogs on a couch on a rug",
          "A RED, Skateboarding kangaroo!", "red_circle and blue_square"] * 20


@pytest.fixture(scope="module")
def sp(tmp_path_factory):
    from pipeline.siglip_folder import build_siglip_folder

    return build_siglip_folder(CORPUS, tmp_path_factory.mktemp("sp") / "tok", context_length=48, vocab_size=300)


def test_hf_tokenizer_ids_are_open_clips_and_spans_cover_each_occurrence(sp):
    import open_clip

    tok = get_tokenizer(sp)
    oc = open_clip.get_tokenizer(sp)  # what training and evaluation tokenize with
    for cap in ("a dog on a couch on a rug", "A RED, Skateboarding kangaroo!", "  the green   triangle.",
                "red_circle left of blue_square"):
        al = align_caption(tok, cap)
        assert al.token_ids == oc([cap])[0].tolist() and len(al.token_ids) == 48
        assert al.token_ids[al.eot_idx] == tok.tokenizer.eos_token_id and not al.truncated
        # every piece's characters, cleaned, are what the tokenizer says the token covers; a lone word-start
        # marker takes the span of the word it starts
        for k, (p, s, e) in enumerate(al.pieces):
            piece = tok.tokenizer.convert_ids_to_tokens(al.token_ids[p]).replace("\u2581", "")
            if not piece:
                assert (s, e) == al.pieces[k + 1][1:]
                continue
            assert tok.clean_fn(cap[s:e]).replace(" ", "").endswith(piece), (cap, cap[s:e], piece)
    cap = "a dog on a couch on a rug"
    al = align_caption(tok, cap)
    first, second = cap.index("on"), cap.index("on", cap.index("couch"))
    p1, p2 = positions_for_span(al, first, first + 2), positions_for_span(al, second, second + 2)
    assert p1 and p2 and set(p1).isdisjoint(p2) and max(p1) < min(p2)  # its own occurrence, not the first match
    assert min(p for p, _, _ in al.pieces) == 0  # no start token: the first word is at position 0


def test_hf_canonicalize_maps_punctuation_and_case_back_to_the_caption(sp):
    tok = get_tokenizer(sp)
    cap = "A RED, Skateboarding kangaroo!"
    al = align_caption(tok, cap)
    red = positions_for_span(al, cap.index("RED"), cap.index("RED") + 3)
    kang = positions_for_span(al, cap.index("kangaroo"), cap.index("kangaroo") + 8)
    assert red and kang and max(red) < min(kang)
    assert all(cap[s:e].strip(",! ") for _, s, e in al.pieces)  # no piece is only punctuation


def test_hf_truncation_counts_the_concepts_past_the_cut(sp):
    cap = " ".join(["a small red circle left of a blue square"] * 8)
    last = cap.rindex("square")
    rows, errors = token_mask_rows([{"caption_id": 1, "caption": cap}],
                                   {1: [Concept(0, "object", "square", last, last + 6),
                                        Concept(1, "attribute", "small", 2, 7, object_id=0)]}, sp)
    assert not errors and rows[0]["truncated"] and rows[0]["unmatched"] == ["object:square"]
    assert rows[0]["attribute_idx"] and rows[0]["tokenizer"].startswith("hf:tok-") and len(rows[0]["token_ids"]) == 48


def test_hub_tokenizers_are_refused_offline_with_what_to_do():
    for name in ("hf-hub:timm/ViT-B-16-SigLIP", "ViT-B-16-SigLIP"):
        with pytest.raises(ValueError, match="runs offline: download that repository .* local-dir:/that/folder"):
            get_tokenizer(name)
    assert get_tokenizer("ViT-B-32-gelu") is not None


def test_hf_alignment_from_many_threads_at_once(sp):
    """The flow maps parse shards over threads, all sharing the cached tokenizer: a fast tokenizer called from
    two threads at once fails with "Already borrowed" unless its calls are serialised."""
    from concurrent.futures import ThreadPoolExecutor

    tok = get_tokenizer(sp)
    caps = [f"a small red circle left of a blue square {'and a green star ' * (i % 3)}".strip() for i in range(64)]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda c: align_caption(tok, c).token_ids, caps * 4))
    assert got == [align_caption(tok, c).token_ids for c in caps * 4]


def test_hf_unknown_pieces_stay_in_their_concept(sp):
    """Characters the tokenizer never saw become <unk> pieces: they are caption pieces (masking a concept hides
    them too), only pad/eos are not."""
    tok = get_tokenizer(sp)
    cap = "a red jazz circle"
    al = align_caption(tok, cap)
    unk = tok.tokenizer.unk_token_id
    assert unk in al.token_ids
    pos = positions_for_span(al, cap.index("jazz"), cap.index("jazz") + 4)
    assert any(al.token_ids[p] == unk for p in pos)
    assert all(al.token_ids[p] not in (tok.tokenizer.pad_token_id, tok.tokenizer.eos_token_id) for p, _, _ in al.pieces)
