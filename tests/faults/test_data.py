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


def test_a_16_bit_png_trains_as_its_gradient_not_pure_white(tmp_path):
    """A 16-bit grayscale PNG opens as mode I;16 and Pillow's convert("RGB") clips every value over 255: the image
    trained as pure white. It is scaled to 8 bits (1/257) and equals the same gradient saved as an 8-bit PNG."""
    import numpy as np
    import torch

    from data_schemas.geometry import Geometry
    from model.data import DataConfig, MaccoDataset, Sample

    wide = (np.arange(64 * 64).reshape(64, 64) * 16).astype(np.uint16)  # 0 .. 65520, left to right, top to bottom
    Image.fromarray(wide).save(tmp_path / "g16.png")
    Image.fromarray(np.rint(wide / 257).astype(np.uint8)).save(tmp_path / "g8.png")
    with Image.open(tmp_path / "g16.png") as im:
        assert im.mode in ("I;16", "I")  # what Pillow makes of a 16-bit PNG
    cfg = DataConfig(image_root=str(tmp_path), rect_prob=0.0)
    geo = Geometry(32, 16)
    items = [MaccoDataset([Sample(1, name, [0, 1], [], [], size=(64, 64))], cfg, geo)[(0, 0)]["image"]
             for name in ("g16.png", "g8.png")]
    pixels = items[0] * torch.tensor(cfg.std).view(3, 1, 1) + torch.tensor(cfg.mean).view(3, 1, 1)
    assert pixels.min() < 0.1 and pixels.max() > 0.9  # a gradient, not white
    torch.testing.assert_close(items[0], items[1])
