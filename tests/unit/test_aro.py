"""model/benchmarks/aro.py: VG-Relation/Attribution groups, exclusion lists (per protocol), the order perturbations."""
import json
import random

import numpy as np
import pytest

from model.benchmarks import EvalConfig, aro, evaluate
from model.benchmarks.scoring import Case
from tests_support import (BAD_FEATURE as BAD, GOOD_FEATURE as GOOD, ProtocolEncoder as FakeEncoder, SHARED,
                           blank_image as _img, dump_json as _dump, needs_shared)


@needs_shared("benchmarks/aro_vg_relation_excluded.json")
def test_exclusion_lists_shipped_match_the_shared_files():
    shipped = json.loads(aro.EXCLUDED.read_text())
    shared = json.loads((SHARED / "benchmarks" / "aro_vg_relation_excluded.json").read_text())
    assert shipped == shared
    a, m = aro.excluded_relations("aro_notebook"), aro.excluded_relations("macco")
    assert len(a) == 157 and len(m) == 160 and m - a == {"leaning against", "pulled by", "pulling"}


def test_vgr_vga_macro_means_exact_group_accuracies_and_excludes():
    """#44: no rounding before the macro mean (the ARO notebook's; MACCO's script rounds to 4 decimals first)."""
    cases = [Case("i", ["f", "t"], 1, "vg", group=g) for g in ["on", "on", "on", "near", "holding"]]
    scores = [np.array([0, 1.0]), np.array([0, 1.0]), np.array([1.0, 0]), np.array([0, 1.0]), np.array([1.0, 0])]
    g = aro.vgr_groups(cases, scores, "aro_notebook")
    assert "near" in aro.excluded_relations()
    assert g["per_relation"]["on"] == 2 / 3 and g["macro"] == (2 / 3 + 0.0) / 2
    assert g["relations_kept"] == 2
    ga = aro.vga_groups(cases, scores, min_count=3)
    assert ga["groups_kept"] == 1 and ga["macro"] == 2 / 3


def test_order_perturbations_are_seeded_and_pre_captioned():
    assert aro.pre_caption("A man (riding) a horse!!  ") == "a man riding a horse"
    a, b = aro.TextShuffler(seed=1), aro.TextShuffler(seed=1)
    cap = "A big brown dog runs across the green field with a small red ball"
    ops = ("shuffle_nouns_and_adj", "shuffle_allbut_nouns_and_adj", "shuffle_within_trigrams", "shuffle_trigrams")
    outs = [getattr(a, o)(cap) for o in ops]
    assert outs == [getattr(b, o)(cap) for o in ops]
    for o in outs:
        assert sorted(o.lower().split()) == sorted(cap.lower().split())
    assert len(set(outs)) > 1


def test_vgr_exclusion_follows_the_protocol(tmp_path):
    recs = [{"image_path": f"{i}.jpg", "bbox_x": 0, "bbox_y": 0, "bbox_w": 4, "bbox_h": 4, "relation_name": rel,
             "true_caption": "t", "false_caption": "f"} for i, rel in enumerate(["on", "pulling", "near"])]
    _dump(tmp_path / "visual_genome_relation.json", recs)
    for i in range(3):
        _img(tmp_path / "images" / f"{i}.jpg")
    enc = FakeEncoder({"t": GOOD, "f": BAD})
    kept = {}
    for proto in ("authors", "macco"):
        r = evaluate(EvalConfig(protocol=proto, roots={"aro-vgr": str(tmp_path)}), ["aro-vgr"], enc=enc)
        b = r["benchmarks"]["aro-vgr"]
        kept[proto] = (b["settings"]["exclusion_list"], b["groups"]["relations_kept"])
    assert kept == {"authors": ("aro_notebook", 2), "macco": ("macco", 1)}  # 'pulling': on MACCO's list only


# nltk.word_tokenize's output (Punkt's English model, then the Treebank-style word tokenizer) on raw captions: a
# sentence-final '.' is its own token, a known abbreviation keeps its period (untrained Punkt would end a sentence
# at 'mr.' and split it into 'mr', '.'), a two-sentence caption splits in two.
NLTK_WORDS = {
    "A man rides a horse. The dog runs.": ["A", "man", "rides", "a", "horse", ".", "The", "dog", "runs", "."],
    "mr. smith rides a horse. the dog runs.": ["mr.", "smith", "rides", "a", "horse", ".", "the", "dog", "runs", "."],
    "Mr. Smith rides a horse. He waves.": ["Mr.", "Smith", "rides", "a", "horse", ".", "He", "waves", "."],
    "A dog on St. Patrick's day. It rains.": ["A", "dog", "on", "St.", "Patrick", "'s", "day", ".", "It", "rains",
                                              "."],
    "A bus at 5 p.m. on the street.": ["A", "bus", "at", "5", "p.m.", "on", "the", "street", "."],
    "Two dogs play. One is brown! Wow?": ["Two", "dogs", "play", ".", "One", "is", "brown", "!", "Wow", "?"],
}


def test_trigram_shuffles_tokenize_as_nltk_word_tokenize():
    """#44: the trigram shuffles see nltk.word_tokenize's tokens (sentences first), so the seeded random stream
    makes the authors' decisions for every later caption too."""
    for text, words in NLTK_WORDS.items():
        assert aro._word_tokenize(text) == words, text
    sh = aro.TextShuffler(seed=1)
    rng = random.Random(1)
    for text, words in NLTK_WORDS.items():
        tris = [words[i:i + 3] for i in range(0, len(words), 3)]
        for t in tris:
            rng.shuffle(t)
        assert sh.shuffle_within_trigrams(text) == " ".join(" ".join(t) for t in tris)
        tris = [words[i:i + 3] for i in range(0, len(words), 3)]
        rng.shuffle(tris)
        assert sh.shuffle_trigrams(text) == " ".join(" ".join(t) for t in tris)


def test_word_tokenize_equals_nltk_where_its_punkt_data_is_installed():
    import nltk

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        pytest.skip("nltk's punkt_tab data is not installed (only needed for this cross-check)")
    extra = ["A man, i.e. a rider... on a horse.", "J. Smith at bat. 2. The crowd cheers.", "a u.s. army jeep. etc."]
    for text in list(NLTK_WORDS) + extra:
        assert aro._word_tokenize(text) == nltk.word_tokenize(text), text
