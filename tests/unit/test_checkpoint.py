"""model/checkpoint.py: which checkpoint a run continues from, and never two runs mixed in one out_dir."""
from __future__ import annotations

import pytest

from model.checkpoint import ResumeRefused, checkpoint_to_resume
from model.train import load_config, train


def cfg_for(world, tables, out, **kw):
    base = dict(arch="macco-micro", batch_size=8, max_steps=2, workers=0, lr_clip=1e-3, lr_predictor=1e-3,
                warmup=1, log_every=1, progress=False, out_dir=str(out), image_root=str(world), save_every=1,
                tables={k: str(v) for k, v in tables.items() if k != "root"})
    return load_config(None, [], **{**base, **kw})


def test_a_resume_with_other_settings_is_refused_naming_them(world, world_tables, tmp_path):
    """`macco train` rerun into an out_dir with other settings said "resumed from step 10", trained nothing, kept
    the old weights and wrote the new settings to config.json."""
    out = tmp_path / "run"
    first = train(cfg_for(world, world_tables, out))
    assert first["steps"] == 2
    config_before = (out / "config.json").read_text()
    with pytest.raises(ResumeRefused, match=r"step-0000002.pt: this checkpoint was trained with other settings "
                                            r"\(lr_clip 0.001 -> 0.0001\); resuming would mix two runs"):
        train(cfg_for(world, world_tables, out, lr_clip=1e-4, resume="auto"))
    assert (out / "config.json").read_text() == config_before  # nothing of the refused run was written
    # where the files are and how often it saves may change: the same run
    path, ck = checkpoint_to_resume(cfg_for(world, world_tables, out, resume="auto", save_every=5, workers=1))
    assert path.name == "step-0000002.pt" and ck["step"] == 2


def test_a_new_run_over_another_runs_checkpoints_is_refused_unless_fresh(world, world_tables, tmp_path):
    out = tmp_path / "run"
    train(cfg_for(world, world_tables, out))
    with pytest.raises(ResumeRefused, match="holds a training run's checkpoints .*resume: auto continues it"):
        checkpoint_to_resume(cfg_for(world, world_tables, out))
    (out / "checkpoints" / "step-0000002.pt").unlink()
    fresh = train(cfg_for(world, world_tables, out, resume="fresh", max_steps=1, save_every=0))
    assert fresh["start_step"] == 0
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-0000001.pt"]  # the old run's are gone
    with pytest.raises(FileNotFoundError, match="nope.pt: checkpoint to resume not found"):
        checkpoint_to_resume(cfg_for(world, world_tables, out, resume=str(tmp_path / "nope.pt")))


def test_raising_max_steps_extends_a_finished_run(world, world_tables, tmp_path):
    """A finished 2-step run rerun with max_steps 4 continues from its step-2 checkpoint (nanoGPT / open_clip): the
    optimiser's and the schedule's state carried on, 2 more steps trained, the lr the new length's cosine from the
    step reached (open_clip recomputes the schedule over the new length), the export the 4-step model's."""
    import math

    import torch

    from model.optim import warmup_cosine

    out = tmp_path / "run"
    first = train(cfg_for(world, world_tables, out))
    assert first["steps"] == 2
    longer = train(cfg_for(world, world_tables, out, max_steps=4, resume="auto"))
    assert longer["start_step"] == 2 and longer["steps"] == 4
    assert [r["step"] for r in longer["history"]] == [3, 4]
    factor = warmup_cosine(1, 4)
    assert [r["lr_clip"] for r in longer["history"]] == pytest.approx([1e-3 * factor(2), 1e-3 * factor(3)])
    assert factor(2) == pytest.approx(0.5 * (1 + math.cos(math.pi / 3)))  # 0.75: not the 2-step run's 0
    ck = torch.load(out / "checkpoints" / "step-0000004.pt", weights_only=True)
    adam_steps = {float(s["step"]) for s in ck["optimizer"]["state"].values()}
    assert adam_steps == {4.0}  # the optimiser continued (a fresh one would count 2)
    assert ck["total"] == 4 and ck["scheduler"]["last_epoch"] == 4 and ck["config"]["max_steps"] == 4
    assert torch.load(longer["export"]["pt"], weights_only=True)["state_dict"].keys()


def test_a_shorter_run_or_a_length_with_other_settings_is_refused(world, world_tables, tmp_path):
    out = tmp_path / "run"
    train(cfg_for(world, world_tables, out, max_steps=3))
    with pytest.raises(ResumeRefused, match=r"step-0000003.pt: this checkpoint's run is 3 steps long; max_steps / "
                                            r"epochs may be raised on resume \(the run continues\), not lowered "
                                            r"\(2 steps\)"):
        checkpoint_to_resume(cfg_for(world, world_tables, out, resume="auto"), total=2)
    with pytest.raises(ResumeRefused, match=r"other settings \(max_steps 3 -> 5, lr_clip 0.001 -> 0.0001\)"):
        checkpoint_to_resume(cfg_for(world, world_tables, out, resume="auto", max_steps=5, lr_clip=1e-4), total=5)
    # epochs instead of max_steps: the length the settings give decides
    path, _ = checkpoint_to_resume(cfg_for(world, world_tables, out, resume="auto", max_steps=None, epochs=2),
                                   total=6)
    assert path.name == "step-0000003.pt"


def test_a_checkpoint_without_its_length_refuses_a_length_change(world, world_tables, tmp_path):
    """A checkpoint written before it recorded its run's length cannot say the new one is longer: refused as any
    other setting."""
    import torch

    out = tmp_path / "run"
    train(cfg_for(world, world_tables, out))
    path = out / "checkpoints" / "step-0000002.pt"
    ck = torch.load(path, weights_only=True)
    del ck["total"]
    torch.save(ck, path)
    with pytest.raises(ResumeRefused, match=r"other settings \(max_steps 2 -> 4\)"):
        checkpoint_to_resume(cfg_for(world, world_tables, out, resume="auto", max_steps=4), total=4)
    assert checkpoint_to_resume(cfg_for(world, world_tables, out, resume="auto"), total=2)[0] == path
