"""Faults in training (model/train.py): unreadable images, nothing to reconstruct and too many skipped images fail
clearly; a resumed run appends its metrics without duplicate steps."""
from __future__ import annotations

import shutil

import pytest

from data_schemas import TABLES, read_table, write_table
from macco.cli import main


def train_cfg(world, tables, out, **kw):
    from model.train import load_config

    base = dict(arch="macco-micro", batch_size=8, max_steps=4, workers=0, lr_clip=1e-3, lr_predictor=1e-3,
                warmup=1, log_every=1, progress=False, out_dir=str(out), image_root=str(world),
                tables={k: str(v) for k, v in tables.items() if k != "root"})
    return load_config(None, [], **{**base, **kw})


def test_training_on_unreadable_images_fails_instead_of_exporting_an_untrained_model(world, world_tables,
                                                                                      tmp_path):
    from model.train import TooManySkipped, train

    root = tmp_path / "imgs"
    shutil.copytree(world, root)
    for p in (root / "train2014").glob("*.jpg"):
        p.write_bytes(b"")  # every training image unreadable
    with pytest.raises(TooManySkipped, match=r"8 of 8 training images .* e\.g\. caption \d+: .*\.jpg"):
        train(train_cfg(root, world_tables, tmp_path / "r", image_root=str(root)))
    assert not (tmp_path / "r" / "export").exists()


def test_macco_without_any_text_mask_is_an_error(world, world_tables, tmp_path):
    from model.train import NothingToReconstruct, train

    tm = read_table(TABLES["token_masks"], world_tables["token_masks"]).to_pylist()
    write_table(TABLES["token_masks"], tmp_path / "tm", TABLES["token_masks"].from_rows(
        [{**r, "relation_idx": [], "attribute_idx": []} for r in tm]))
    tables = {**world_tables, "token_masks": tmp_path / "tm"}
    with pytest.raises(NothingToReconstruct, match="none of the .* training captions has a relation or attribute"):
        train(train_cfg(world, tables, tmp_path / "r", mode="macco"))
    assert train(train_cfg(world, tables, tmp_path / "ft", mode="clip-ft", max_steps=1))["steps"] == 1


def test_resumed_training_appends_metrics_without_duplicate_steps(world, world_tables, tmp_path):
    import csv

    from model.train import train

    train(train_cfg(world, world_tables, tmp_path / "r", max_steps=6, save_every=3))
    # a kill after step 5 leaves rows 1-5 logged and the step-3 checkpoint
    (tmp_path / "r" / "checkpoints" / "step-0000006.pt").unlink()
    rows = list(csv.DictReader((tmp_path / "r" / "metrics.csv").open()))
    with (tmp_path / "r" / "metrics.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows[:5])
    s = train(train_cfg(world, world_tables, tmp_path / "r", max_steps=6, save_every=3, resume="auto"))
    assert s["start_step"] == 3
    steps = [int(r["step"]) for r in csv.DictReader((tmp_path / "r" / "metrics.csv").open())]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_too_many_skipped_images_is_one_line_from_macco_train(world, world_tables, tmp_path, capsys):
    """TooManySkipped reached the user as a traceback."""
    root = tmp_path / "imgs"
    shutil.copytree(world, root)
    for p in (root / "train2014").glob("*.jpg"):
        p.write_bytes(b"not an image")
    tables = "{" + ", ".join(f"{k}: {v}" for k, v in world_tables.items() if k != "root") + "}"
    assert main(["train", "arch=macco-micro", "batch_size=8", "max_steps=2", "workers=0", "warmup=1",
                 f"out_dir={tmp_path / 'r'}", f"image_root={root}", f"tables={tables}", "progress=false"]) == 2
    from tests_support import without_logging_errors

    err = without_logging_errors(capsys.readouterr().err)
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith("macco train: 8 of 8 training images") and \
        "max_skipped_fraction" in last


def test_empty_data_and_a_batch_larger_than_the_data_are_one_line_from_macco_train(world, world_tables, tmp_path,
                                                                                   capsys):
    """An empty captions table, or batch_size over the training pairs, was a ValueError traceback."""
    from model.data import build_samples

    write_table(TABLES["captions"], tmp_path / "empty", TABLES["captions"].from_rows([]))
    pairs = len(build_samples({k: v for k, v in world_tables.items() if k != "root"})[0])

    def run(tables, batch):
        shown = "{" + ", ".join(f"{k}: {v}" for k, v in tables.items() if k != "root") + "}"
        code = main(["train", "arch=macco-micro", f"batch_size={batch}", "max_steps=2", "workers=0", "warmup=1",
                     f"out_dir={tmp_path / 'r'}", f"image_root={world}", f"tables={shown}", "progress=false"])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err, err
        return err.strip().splitlines()[-1]

    line = run({**world_tables, "captions": tmp_path / "empty"}, 8)
    assert line.startswith(f"macco train: train: no training data: the captions table {tmp_path / 'empty'} holds 0 "
                           "caption(s) of split 'train'")
    line = run(world_tables, pairs + 1)
    assert f"train: {pairs} training caption-image pairs per epoch are fewer than batch_size {pairs + 1}" in line
    assert not (tmp_path / "r" / "checkpoints").exists()
