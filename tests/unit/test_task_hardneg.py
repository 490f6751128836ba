"""#46: the hard-negative training modes (negclip, ce-clip, macco+negclip, macco+ce-clip) through the real training
entry (``model.train.train``) on the synthetic world: their terms logged, the negatives' counts reported, the CMR
threshold carried in the checkpoint, bad configs refused in one line; and the task's terms equal to
``model.hardneg``'s on the same features."""
import json

import pytest
import torch
import torch.nn.functional as F

from data_schemas.config import ConfigError
from model.hardneg import CE_CLIP_SLOTS, CeClipConfig, ce_clip_terms, initial_threshold, negclip_loss
from model.train import check_tables, load_config, train
from model.negatives import CE_CLIP_KINDS
from tests_support import micro_clip  # noqa: F401 (fixture)
from tests_support import micro_train_config as _cfg

TERMS = {"negclip": {"contrast_loss"},
         "ce-clip": {"contrast_loss", "cmr_loss", "imc_loss"},
         "macco+negclip": {"contrast_loss", "intra_modal_contrast_loss", "text_reconstruction_loss",
                           "image_reconstruction_loss"},
         "macco+ce-clip": {"contrast_loss", "intra_modal_contrast_loss", "text_reconstruction_loss",
                           "image_reconstruction_loss", "cmr_loss", "imc_loss"}}


@pytest.mark.parametrize("mode", sorted(TERMS))
def test_each_mode_trains_through_the_training_entry(mode, world, world_tables, tmp_path):
    notes = []
    s = train(_cfg(world, world_tables, tmp_path / mode, mode=mode, max_steps=3), on_note=notes.append)
    terms = {k for k in s["history"][0] if k.endswith("_loss")} - {"total_loss"}
    assert terms == TERMS[mode]
    weights = {"contrast_loss": 1.0, "intra_modal_contrast_loss": 0.1, "text_reconstruction_loss": 20.0,
               "image_reconstruction_loss": 250.0, "cmr_loss": 0.2, "imc_loss": 0.2}
    for h in s["history"]:
        assert h["total_loss"] == pytest.approx(sum(weights[k] * h[k] for k in terms), rel=1e-4)
        assert 0 < h["hard_negatives"] <= 8 * (CE_CLIP_SLOTS if "ce-clip" in mode else 1)
    counts = json.loads((tmp_path / mode / "summary.json").read_text())["samples"]["hard_negatives"]
    assert counts["style"] == mode.split("+")[-1] and counts["captions"] == s["samples"]["captions"] - \
        s["samples"]["no_token_mask"]
    assert counts["with_negatives"] + counts["without_negatives"] == counts["captions"]
    assert sum(counts["without_negatives_by_reason"].values()) == counts["without_negatives"]
    assert any(f"{counts['with_negatives']} of {counts['captions']} captions have a hard negative" in n for n in notes)
    assert (tmp_path / mode / "export").exists()


def test_ce_clip_resume_continues_the_threshold(world, world_tables, tmp_path):
    """A ce-clip run killed after its step-2 checkpoint and resumed equals the uninterrupted run: its losses, its
    weights, and the CMR threshold it carries (which moved from its start value)."""
    kw = dict(mode="macco+ce-clip", max_steps=4)
    full = train(_cfg(world, world_tables, tmp_path / "a", **kw))
    train(_cfg(world, world_tables, tmp_path / "b", save_every=2, **kw))
    (tmp_path / "b" / "checkpoints" / "step-0000004.pt").unlink()
    mid = torch.load(tmp_path / "b" / "checkpoints" / "step-0000002.pt", weights_only=True)["task"]
    assert not torch.equal(mid["cmr_threshold"], initial_threshold(CeClipConfig(), CE_CLIP_SLOTS))
    resumed = train(_cfg(world, world_tables, tmp_path / "b", resume="auto", **kw))
    assert resumed["start_step"] == 2
    a = {h["step"]: h for h in full["history"]}
    for h in resumed["history"]:
        for k in ("total_loss", "cmr_loss", "imc_loss", "contrast_loss", "cmr_threshold_0", "cmr_threshold_1"):
            assert h[k] == pytest.approx(a[h["step"]][k], rel=1e-4, abs=1e-6), (h["step"], k)
    wa = torch.load(full["checkpoint"], weights_only=True)["task"]
    wb = torch.load(resumed["checkpoint"], weights_only=True)["task"]
    for k in wa:
        assert torch.allclose(wa[k].float(), wb[k].float(), atol=1e-5), k


def test_bad_configs_are_one_line(world, world_tables, tmp_path):
    with pytest.raises(ConfigError, match="mode: 'negclip-ft'"):
        load_config(None, ["mode=negclip-ft"])
    with pytest.raises(ConfigError, match="hardneg: mode negclip makes its own"):
        load_config(None, ["mode=negclip", "hardneg=true"])
    no_graphs = {k: str(v) for k, v in world_tables.items() if k not in ("root", "scene_graphs")}
    for mode in TERMS:
        with pytest.raises(ConfigError, match="no scene_graphs") as e:
            check_tables(_cfg(world, world_tables, tmp_path, mode=mode, tables=no_graphs))
        assert "\n" not in str(e.value)


def _features(seed=0, B=6, K=CE_CLIP_SLOTS, E=16):
    g = torch.Generator().manual_seed(seed)
    n = lambda *s: F.normalize(torch.randn(*s, E, generator=g), dim=-1)  # noqa: E731
    return n(B), n(B), n(B, K), torch.rand(B, K, generator=g) > 0.3


def test_the_task_terms_are_the_hardneg_functions(micro_clip):
    """The plain modes' contrast is model.hardneg's (NegCLIP's loss; CE-CLIP's contrast), through the task's own
    ``_contrast`` and ``_ce_terms``; the threshold advances only on a training step."""
    from model.task import MaccoConfig
    from model.task_hardneg import HardNegativeTask

    assert CE_CLIP_SLOTS == len(CE_CLIP_KINDS)
    I, T, N, valid = _features()
    scale = torch.tensor(10.0)
    neg = HardNegativeTask(micro_clip, MaccoConfig(mode="negclip"))
    out = neg._contrast(I, T, None, None, scale, neg.objective, lambda: N.reshape(-1, 16)[valid.reshape(-1)])
    assert out["contrast_loss"].item() == pytest.approx(negclip_loss(I, T, N, scale, valid).item(), rel=1e-6)
    ce = HardNegativeTask(micro_clip, MaccoConfig(mode="ce-clip"), ce=CeClipConfig(threshold_type="max"))
    start = ce.cmr_threshold.clone()
    theirs, nxt = ce_clip_terms(I, T, N, valid, scale, start, CeClipConfig(threshold_type="max"))
    out = ce._contrast(I, T, None, None, scale, ce.objective, lambda: N.reshape(-1, 16))
    assert out["contrast_loss"].item() == pytest.approx(theirs["contrast_loss"].item(), rel=1e-6)
    rows = {"i_glob": I, "t_glob": T, "neg": N.reshape(-1, 16), "valid": valid.reshape(-1)}
    ce.eval()
    ours = ce._hard_terms(rows, scale, CE_CLIP_SLOTS, advance=True)
    assert torch.equal(ce.cmr_threshold, start)  # not a training step
    ce.train()
    ce._hard_terms(rows, scale, CE_CLIP_SLOTS, advance=False)
    assert torch.equal(ce.cmr_threshold, start)  # not the last pass of an accumulated step
    ours = ce._hard_terms(rows, scale, CE_CLIP_SLOTS, advance=True)
    assert ours["contrast_loss"].item() == pytest.approx(theirs["contrast_loss"].item(), rel=1e-6)
    for k in ("cmr_loss", "imc_loss"):
        assert ours[k].item() == pytest.approx(theirs[k].item(), rel=1e-6)
    assert torch.allclose(ce.cmr_threshold, nxt) and not torch.equal(nxt, start)


def test_a_hard_negative_run_is_probed_with_its_negatives(world, world_tables, tmp_path):
    """The evaluate stage's gradient probe loads a ce-clip run's task (its threshold with it) and builds a held-out
    batch with the hard-negative slots, as training does; CE-CLIP's terms get their gradient rows."""
    from model.probes import held_out_batch, load_training_task, term_gradient_norms

    run = train(_cfg(world, world_tables, tmp_path / "r", mode="macco+ce-clip", max_steps=2))
    task, cfg = load_training_task(run["checkpoint"])
    saved = torch.load(run["checkpoint"], weights_only=True)["task"]["cmr_threshold"]
    assert torch.equal(task.cmr_threshold, saved)
    tables = {k: v for k, v in world_tables.items() if k != "root"}
    batch = held_out_batch(task, cfg, tables, split="train", size=8)
    assert batch["hard_texts"].shape[:2] == (8, CE_CLIP_SLOTS)
    norms = term_gradient_norms(task, batch)
    assert {"cmr_loss", "imc_loss", "contrast_loss"} <= set(norms) and norms["imc_loss"]["text"] > 0
    assert torch.equal(task.cmr_threshold, saved)  # a probe is no training step


def test_a_task_of_another_mode_starts_a_hard_negative_task(micro_clip):
    """init_task: a MACCO task's weights start a ce-clip task (its threshold at the start value) and a ce-clip
    task's start a negclip one (its threshold dropped)."""
    from model.task import MaccoConfig, MaccoTask
    from model.task_hardneg import HardNegativeTask

    macco = MaccoTask(micro_clip, MaccoConfig(mode="macco")).state_dict()
    ce = HardNegativeTask(micro_clip, MaccoConfig(mode="macco+ce-clip"))
    ce.load_state_dict(macco)
    assert torch.equal(ce.cmr_threshold, initial_threshold(CeClipConfig(), CE_CLIP_SLOTS))
    HardNegativeTask(micro_clip, MaccoConfig(mode="macco+negclip")).load_state_dict(ce.state_dict())


DDP_CASES = {"negclip": {"mode": "negclip"}, "macco+ce-clip": {"mode": "macco+ce-clip"}}


@pytest.fixture(scope="module")
def two_process_steps(tmp_path_factory):
    """Each case's step on 2 gloo processes, as tests/unit/test_train.py's DDP cases."""
    import ddp_support as ds

    return ds.two_process_steps(tmp_path_factory.mktemp("ddp"), DDP_CASES)


@pytest.mark.parametrize("name", list(DDP_CASES))
def test_two_process_step_equals_one_process_step(name, two_process_steps):
    """Under DDP the negatives and their validity are gathered: the terms (CE-CLIP's rank and IMC terms on the
    global batch) and every gradient equal one process on the global batch."""
    import ddp_support as ds

    task = ds.make_task(DDP_CASES[name])
    ref_terms = ds.step(task, task, ds.make_batch(), slice(None))
    ref_grads = ds.grads(task)
    got = two_process_steps[name]
    assert set(got["terms"]) == set(ref_terms) and ("cmr_loss" in ref_terms) == ("ce-clip" in name)
    for k, v in ref_terms.items():
        assert got["terms"][k] == pytest.approx(float(v), rel=1e-5, abs=1e-6), k
    assert set(got["grads"]) == set(ref_grads) and ref_grads
    for k, g in ref_grads.items():
        assert torch.allclose(got["grads"][k], g, rtol=1e-4, atol=1e-6), k


@pytest.mark.parametrize("mode", ["negclip", "macco+ce-clip"])
def test_accumulated_step_equals_the_full_batch_step(mode):
    """accum_steps k: the negatives' rows are spliced as MACCO's, so the step's terms (CE-CLIP's on the whole
    batch, with the threshold of before the step) and gradients are the unaccumulated step's, and the threshold
    advances once, to the unaccumulated step's value."""
    import ddp_support as ds

    batch = ds.make_batch()
    task = ds.make_task({"mode": mode})
    want_terms, want_grads = ds.accumulated_grads(ds.accum_state(task, task, 1, 8, 1), batch)
    want_threshold = getattr(task, "cmr_threshold", None)
    for accum, batch_size in ((2, 8), (3, 9)):
        task = ds.make_task({"mode": mode})
        terms, grads = ds.accumulated_grads(ds.accum_state(task, task, accum, batch_size, 1), batch)
        assert set(terms) == set(want_terms)
        for k, v in want_terms.items():
            assert terms[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
        assert set(grads) == set(want_grads) and "clip.logit_scale" in grads
        for k, g in want_grads.items():
            torch.testing.assert_close(grads[k], g, rtol=1e-4, atol=1e-5 * (g.abs().max().item() + 1e-12), msg=k)
        if want_threshold is not None:
            assert torch.allclose(task.cmr_threshold, want_threshold)
