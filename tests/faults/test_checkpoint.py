"""Faults in resuming training (model/checkpoint.py): a killed run resumed on other data is refused in one line, not
"resumed from step N" on other tables."""
from __future__ import annotations

import logging
import shutil

import pytest
import torch

from data_schemas import TABLES, read_table, write_table
from model.checkpoint import ResumeRefused, checkpoint_to_resume
from model.train import load_config, train


def cfg_for(world, tables, out, **kw):
    base = dict(arch="macco-micro", batch_size=8, max_steps=2, workers=0, lr_clip=1e-3, lr_predictor=1e-3,
                warmup=1, log_every=1, progress=False, out_dir=str(out), image_root=str(world), save_every=1,
                tables={k: str(v) for k, v in tables.items() if k != "root"})
    return load_config(None, [], **{**base, **kw})


def test_a_resume_on_other_tables_is_refused_and_moved_tables_resume(world, world_tables, tmp_path, caplog):
    out = tmp_path / "run"
    train(cfg_for(world, world_tables, out))
    (out / "checkpoints" / "step-0000002.pt").unlink()  # killed after step 1
    caps = read_table(TABLES["captions"], world_tables["captions"]).to_pylist()
    write_table(TABLES["captions"], tmp_path / "other", TABLES["captions"].from_rows(caps[1:]))
    other = {**world_tables, "captions": tmp_path / "other"}
    with pytest.raises(ResumeRefused, match=r"step-0000001.pt: this checkpoint was trained on other data \(content "
                                            r"hash captions \w{12} -> \w{12}\); resuming would mix two runs"):
        train(cfg_for(world, other, out, resume="auto"))
    # the same table in another folder is the same data
    shutil.copytree(world_tables["captions"], tmp_path / "moved")
    path, _ = checkpoint_to_resume(cfg_for(world, {**world_tables, "captions": tmp_path / "moved"}, out,
                                           resume="auto"))
    assert path.name == "step-0000001.pt"
    # a checkpoint from before the record: accepted, with a warning saying its data is unverified
    ck = torch.load(path, map_location="cpu", weights_only=True)
    del ck["tables"]
    torch.save(ck, path)
    with caplog.at_level(logging.WARNING, logger="model.checkpoint"):
        assert checkpoint_to_resume(cfg_for(world, other, out, resume="auto"))[0] == path
    assert "does not record the tables it trained on" in caplog.text
