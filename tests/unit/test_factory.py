"""model/factory.py: where a model's weights come from (said in the log), bad weights files and weights of another
architecture in one line naming the file."""
from __future__ import annotations

from pathlib import Path

import pytest

from macco.cli import main
from tests_support import one_line_error


def test_train_says_what_it_starts_from_and_a_resume_says_so(world, world_tables, tmp_path, capsys):
    args = ["train", "arch=macco-micro", "batch_size=8", "max_steps=3", "workers=0", "warmup=1", "save_every=2",
            f"out_dir={tmp_path / 'r'}", f"image_root={world}", "log_every=1",
            "tables={" + ", ".join(f"{k}: {v}" for k, v in world_tables.items() if k != "root") + "}"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "train macco: macco-micro: no pretrained weights, initialised randomly" in err
    assert "contrast" in err and "image_reconstruction" in err and "samples/s" in err  # the bar's terms and rate
    (tmp_path / "r" / "checkpoints" / "step-0000003.pt").unlink()  # as if killed after its step-2 checkpoint
    assert main(args + ["resume=auto"]) == 0
    err = capsys.readouterr().err
    assert "resumed from step 2 (checkpoint" in err and "step-0000002.pt" in err
    assert "initialized randomly" not in err  # open_clip's random-init warning is false for a resumed run
    export = tmp_path / "r" / "export.pt"
    assert main(args[:-4] + [f"out_dir={tmp_path / 'ft'}", f"pretrained={export}", "mode=clip-ft",
                             args[-3], args[-2], args[-1]]) == 0
    assert f"weights from {export} (sha256 " in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["truncated", "text", "empty", "pickled"])
def test_a_bad_weights_file_is_one_line_naming_it_for_eval_and_train(world, world_tables, tmp_path, capsys, kind):
    """`macco eval --checkpoint` of a truncated / text / empty file was `RuntimeError: PytorchStreamReader...`,
    `KeyError: 101`, a bare `EOFError` (naming no file); a pickled checkpoint's refusal a traceback too."""
    import open_clip
    import torch

    from model.factory import register_model_configs

    register_model_configs()
    state = open_clip.create_model("macco-micro").state_dict()
    good = tmp_path / "good.pt"
    torch.save({"state_dict": state}, good)
    bad = tmp_path / f"{kind}.pt"
    if kind == "truncated":
        bad.write_bytes(good.read_bytes()[:len(good.read_bytes()) // 2])
    elif kind == "text":
        bad.write_text("hello\n")
    elif kind == "empty":
        bad.write_bytes(b"")
    else:
        torch.save({"state_dict": state, "note": Path("x")}, bad)  # an object, not a tensor
    expected = {"truncated": "not a readable weights file (RuntimeError", "text": "not a readable weights file",
                "empty": "an empty file, not weights", "pickled": "not plain weights (it holds a pathlib"}
    assert main(["eval", "--model", "macco-micro", "--checkpoint", str(bad), "--benchmark", "aro-vgr",
                 "--world", str(world)]) == 2
    assert f"{bad}: {expected[kind]}" in one_line_error(capsys, "eval")
    tables = "{" + ", ".join(f"{k}: {v}" for k, v in world_tables.items() if k != "root") + "}"
    assert main(["train", "arch=macco-micro", f"pretrained={bad}", f"out_dir={tmp_path / 'r'}", f"tables={tables}",
                 f"image_root={world}", "batch_size=8"]) == 2
    assert f"{bad}: {expected[kind]}" in one_line_error(capsys, "train")


def test_train_without_tables_and_eval_of_another_architectures_weights_are_one_line(tmp_path, capsys):
    """`macco train` with no --config built ViT-B/32 for 10 s, then `KeyError: 'captions'`; `macco eval --model
    ViT-B-32 --checkpoint` of a tiny run's export was open_clip's AssertionError."""
    import open_clip
    import torch

    from model.factory import register_model_configs

    assert main(["train", f"out_dir={tmp_path / 'r'}"]) == 2
    assert "train config tables: no captions, token_masks, regions" in one_line_error(capsys, "train")
    register_model_configs()
    torch.save({"state_dict": open_clip.create_model("macco-micro").state_dict(), "arch": "macco-micro"},
               tmp_path / "export.pt")
    (tmp_path / "visual_genome_relation.json").write_text("[]")  # the inputs are checked before the model loads
    (tmp_path / "images").mkdir()
    assert main(["eval", "--model", "ViT-B-32", "--checkpoint", str(tmp_path / "export.pt"), "--benchmark", "aro-vgr",
                 "--root", str(tmp_path)]) == 2
    assert "these weights do not fit architecture 'ViT-B-32-quickgelu'; the file was exported from 'macco-micro' " \
           "(pass --model macco-micro)" in one_line_error(capsys, "eval")
