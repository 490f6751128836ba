"""#29's training options and probe: the causal language-model stage of a base (``mode: lm``, H2), image masks
drawn from relation phrases only (``mask_phrases: relation``, H3), and the BigramShift word-order probe."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from data_schemas import TABLES, read_table


def _cfg(world, world_tables, out: Path, **kw):
    from model.train import load_config

    base = dict(arch="macco-micro", batch_size=8, max_steps=4, workers=0, lr_clip=1e-3, lr_predictor=1e-3, warmup=1,
                log_every=1, progress=False, out_dir=str(out), image_root=str(world),
                tables={k: str(v) for k, v in world_tables.items() if k != "root"})
    return load_config(None, [], **{**base, **kw})


def test_lm_mode_trains_only_the_text_tower_on_next_tokens_and_exports_a_plain_clip(world, world_tables, tmp_path):
    from safetensors.torch import load_file

    from model.lm import LMTask, lm_vocabulary
    from model.train import build_task, train

    cfg = _cfg(world, world_tables, tmp_path / "r", mode="lm", max_steps=30, batch_size=16, lr_clip=3e-3)
    vocab = lm_vocabulary(world_tables["token_masks"], world_tables["captions"], "train")
    tm = read_table(TABLES["token_masks"], world_tables["token_masks"]).to_pylist()
    assert 49406 in vocab and 49407 in vocab and len(vocab) < 300  # the corpus's tokens, SOT and EOT included
    torch.manual_seed(cfg.seed)  # as train's setup does before it builds the task: the same initial weights
    task = build_task(cfg, vocab)
    assert isinstance(task, LMTask)
    trained = {n for n, p in task.named_parameters() if p.requires_grad}
    assert trained and all(n.startswith(("clip.token_embedding", "clip.transformer", "clip.ln_final",
                                         "clip.positional_embedding", "lm_head")) for n in trained)
    # the loss: the next token at each position up to the EOT, nothing after it
    text = torch.tensor([tm[0]["token_ids"]])
    eot = tm[0]["eot_idx"]
    h = task.token_features(text)[0, :eot]
    logits = task.lm_head(h)
    rows = torch.tensor([vocab.index(t) for t in tm[0]["token_ids"][1:eot + 1]])
    assert task({"text": text})["lm_loss"].item() == pytest.approx(torch.nn.functional.cross_entropy(logits, rows).item(),
                                                         rel=1e-5)
    before = {k: v.clone() for k, v in task.clip.visual.state_dict().items()}
    summary = train(cfg)
    first, last = summary["history"][0]["lm_loss"], summary["history"][-1]["lm_loss"]
    assert last < first  # it learns the captions
    exported = load_file(str(tmp_path / "r" / "export" / "open_clip_model.safetensors"))
    assert not any("lm_head" in k for k in exported)
    shared = [k for k in before if f"visual.{k}" in exported]
    assert shared and all(torch.equal(exported[f"visual.{k}"], before[k]) for k in shared)  # the image tower: as built


def test_relation_masks_draw_from_relation_phrases_only(world, world_tables):
    from data_schemas.geometry import Geometry
    from model.data import DataConfig, MaccoDataset, build_samples

    tables = {k: Path(v) for k, v in world_tables.items() if k != "root"}
    samples, _ = build_samples(tables, "train")
    s = next(x for x in samples if "relation" in x.phrase_kinds and "attribute" in x.phrase_kinds)
    rel = [b for b, k in zip(s.phrase_boxes, s.phrase_kinds) if k == "relation"]
    for mode, allowed in (("relation", rel), ("any", s.phrase_boxes)):
        ds = MaccoDataset([s], DataConfig(image_root=str(world), rect_prob=0.0, mask_phrases=mode), Geometry(32, 8))
        assert ds._phrases(s) == allowed
    assert all(len(b) == 2 for b in rel)  # a relation phrase's boxes: its subject's and its object's
    only_attr = next(x for x in samples if x.phrase_kinds and "relation" not in x.phrase_kinds) \
        if any(x.phrase_kinds and "relation" not in x.phrase_kinds for x in samples) else None
    if only_attr is not None:  # no relation phrase: every phrase, as the reference
        ds = MaccoDataset([only_attr], DataConfig(mask_phrases="relation"), Geometry(32, 8))
        assert ds._phrases(only_attr) == only_attr.phrase_boxes


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


def test_tf32_is_set_for_a_run_and_restored_after_it(world, world_tables, tmp_path, monkeypatch):
    """#32: TF32 is a knob of the run (train.tf32), set while it trains and restored after it, so a flow's later
    tasks in the same worker (fp32 evaluation) do not inherit it."""
    import torch

    from model import train as train_module
    from model.runtime import tf32

    seen = []
    monkeypatch.setattr(train_module.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(train_module, "_train", lambda *a: seen.append(torch.backends.cuda.matmul.allow_tf32) or {})
    torch.backends.cuda.matmul.allow_tf32 = False
    for knob in (True, False):
        train_module.train(_cfg(world, world_tables, tmp_path / "r", tf32=knob, device="cpu"))
        train_module.train(_cfg(world, world_tables, tmp_path / "r", tf32=knob, device="auto"))
    assert seen == [False, True, False, False] and torch.backends.cuda.matmul.allow_tf32 is False
    before = torch.backends.cudnn.allow_tf32
    with tf32(not before):
        assert torch.backends.cudnn.allow_tf32 is (not before)
    assert torch.backends.cudnn.allow_tf32 is before


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


def test_lm_task_refuses_tokens_outside_its_vocabulary_and_a_bidirectional_tower():
    """The head's vocabulary is the training captions': another caption's token is one line, checked on the host
    batch in the loop (``sizes_for``) and in a direct call; a SigLIP text tower (no causal order) is refused."""
    import open_clip

    from model.factory import register_model_configs
    from model.lm import LMTask

    register_model_configs()
    clip = open_clip.create_model("macco-micro")
    tok = open_clip.get_tokenizer("macco-micro")
    seen = tok(["a red circle"])
    task = LMTask(clip, sorted(set(seen[0].tolist()) - {0}))
    assert task.sizes_for({"text": seen}) == [] and torch.isfinite(task({"text": seen}, sizes=[])["lm_loss"])
    other = {"text": tok(["a blue square"])}
    for call in (lambda: task.sizes_for(other), lambda: task(other)):
        with pytest.raises(ValueError, match="outside the vocabulary of the training captions"):
            call()
    with pytest.raises(ValueError, match="mode lm: needs a causal CLIP text tower"):
        LMTask(open_clip.create_model("macco-siglip-tiny"), [1, 2, 3])
