"""model/probes_text.py: the BigramShift word-order probe and its word features."""
from __future__ import annotations

import random

import numpy as np
import torch


def test_bigram_shift_swaps_two_different_adjacent_words():
    from model.probes import bigram_shift

    rng = random.Random(0)
    for cap in ("a red circle left of a blue square", "there is a small green cross"):
        s = bigram_shift(cap, rng)
        a, b = cap.split(), s.split()
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        assert sorted(a) == sorted(b) and len(diff) == 2 and diff[1] == diff[0] + 1
    assert bigram_shift("a a a", rng) is None and bigram_shift("word", rng) is None


def test_bigram_shift_probe_runs_on_a_tower(world):
    import open_clip

    from model.factory import register_model_configs
    from model.probes import ProbeConfig, bigram_shift_probe

    register_model_configs()
    model = open_clip.create_model("macco-micro").eval()
    tok = open_clip.get_tokenizer("macco-micro")
    caps = [f"a {c} circle left of a {d} square" for c in ("red", "blue", "green", "white") for d in
            ("black", "purple", "orange", "yellow")] * 3
    r = bigram_shift_probe(model, tok, caps, ProbeConfig(world=str(world), folds=3))
    assert r["bigram_shift_n"] == len(caps)
    assert 0.0 <= r["bigram_shift_tokens_acc"] <= 1.0 and 0.0 <= r["bigram_shift_eot_acc"] <= 1.0


def test_bigram_shift_word_features_cover_exactly_the_words_on_a_siglip_tokenizer(tmp_path):
    """A SigLIP folder's tokenizer has no start token and small end/padding ids: the word-token mean covers the
    caption's word tokens (its ids before the end token), not positions 1..argmax as CLIP's BPE."""
    import json

    import open_clip

    from model.factory import CONFIG_DIR, create_clip, register_model_configs
    from model.masked import encode_text_tokens
    from model.probes_text import token_and_eot_features
    from pipeline.siglip_folder import build_siglip_folder

    register_model_configs()
    caps = ["a red circle left of a blue square", "the green triangle is above the yellow star"]
    folder = build_siglip_folder(caps * 20, tmp_path / "sig",
                                 json.loads((CONFIG_DIR / "macco-siglip-tiny.json").read_text()),
                                 context_length=32, vocab_size=200)
    torch.manual_seed(0)
    model, tok = create_clip(folder, None).eval(), open_clip.get_tokenizer(folder)
    words = [len(tok.tokenizer(c, add_special_tokens=False)["input_ids"]) for c in caps]
    t = tok(caps)
    assert t[0, 0] != 0 and t[0, 0] < t[0].max()  # no start token; an id past the words is the largest
    got, _ = token_and_eot_features(model, tok, caps)
    with torch.no_grad():
        x, _ = encode_text_tokens(model, t)
    want = np.stack([x[i, :n].float().mean(0).numpy() for i, n in enumerate(words)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
