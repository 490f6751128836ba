"""model/lm.py: the causal language-model stage of a base (``mode: lm``, H2)."""
from __future__ import annotations

import pytest
import torch

from data_schemas import TABLES, read_table
from tests_support import micro_train_config as _cfg


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
