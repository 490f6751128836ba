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
