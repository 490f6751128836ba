"""Faults in the training data (model/data.py): images resized or replaced after the tables were made are skipped."""
from __future__ import annotations

import shutil

import pytest
from PIL import Image


def test_training_skips_an_image_resized_after_grounding(world, world_tables, tmp_path):
    """The issue: standalone `macco train` never compared the image with the tables: an image replaced by a 2x
    copy moved its patch mask silently."""
    from model.train import TooManySkipped, load_config, train

    root = tmp_path / "imgs"
    shutil.copytree(world, root)
    for p in (root / "train2014").glob("*.jpg"):
        with Image.open(p) as im:
            im.resize((im.width * 2, im.height * 2)).save(p)
    cfg = load_config(None, [], arch="macco-micro", batch_size=8, max_steps=2, workers=0, lr_clip=1e-3, warmup=1,
                      log_every=1, progress=False, out_dir=str(tmp_path / "r"), image_root=str(root),
                      tables={k: str(v) for k, v in world_tables.items() if k != "root"})
    with pytest.raises(TooManySkipped, match=r"image_size_mismatch: the image is 128x128 as displayed, the "
                                             r"captions table says 64x64"):
        train(cfg)
    assert not (tmp_path / "r" / "export").exists()


def test_training_skips_an_image_replaced_by_a_decompression_bomb(world, world_tables, tmp_path):
    """An image replaced by a 69-byte PNG claiming 30000x30000 crashed training even at max_skipped_fraction 1.0."""
    from model.train import load_config, train
    from tests_support import bomb_png

    root = tmp_path / "imgs"
    shutil.copytree(world, root)
    victims = sorted((root / "train2014").glob("*.jpg"))[:3]
    for p in victims:
        p.write_bytes(bomb_png())
    cfg = load_config(None, [], arch="macco-micro", batch_size=8, max_steps=2, workers=0, lr_clip=1e-3, warmup=1,
                      log_every=1, progress=False, out_dir=str(tmp_path / "r"), image_root=str(root),
                      max_skipped_fraction=1.0, tables={k: str(v) for k, v in world_tables.items() if k != "root"})
    summary = train(cfg)
    assert summary["steps"] == 2 and (tmp_path / "r" / "export.pt").is_file()
    assert all("DecompressionBombError" in e["error"] for e in summary["skipped_examples"])
