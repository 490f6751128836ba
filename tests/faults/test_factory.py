"""Faults in weights files (model/factory.py): a garbage ``.safetensors`` (safetensors' ``SafetensorError``, which
derives from Exception alone) was a traceback in ``macco eval --checkpoint``, ``train pretrained=`` and a
``local-dir:`` folder's own weights; now one line naming the file."""
from __future__ import annotations

from macco.cli import main
from tests_support import one_line_error


def test_a_garbage_safetensors_is_one_line_for_eval_train_and_a_local_dir(world, world_tables, tmp_path, capsys):
    import open_clip

    from model.export import export_clip
    from model.factory import register_model_configs

    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\xff" * 300)  # a header length of 2**64-1: "header too large"
    assert main(["eval", "--model", "macco-micro", "--checkpoint", str(bad), "--benchmark", "aro-vgr",
                 "--world", str(world)]) == 2
    assert f"{bad}: not a readable weights file (SafetensorError" in one_line_error(capsys, "eval")
    tables = "{" + ", ".join(f"{k}: {v}" for k, v in world_tables.items() if k != "root") + "}"
    assert main(["train", "arch=macco-micro", f"pretrained={bad}", f"out_dir={tmp_path / 'r'}", f"tables={tables}",
                 f"image_root={world}", "batch_size=8"]) == 2
    assert f"{bad}: not a readable weights file (SafetensorError" in one_line_error(capsys, "train")
    register_model_configs()
    export_clip(open_clip.create_model("macco-micro"), "macco-micro", tmp_path / "export")
    weights = tmp_path / "export" / "open_clip_model.safetensors"
    weights.write_bytes(b"\xff" * 300)
    assert main(["eval", "--model", f"local-dir:{tmp_path / 'export'}", "--benchmark", "aro-vgr",
                 "--world", str(world)]) == 2
    assert f"{weights}: not a readable weights file (SafetensorError" in one_line_error(capsys, "eval")
    assert main(["train", f"arch=local-dir:{tmp_path / 'export'}", f"out_dir={tmp_path / 'r2'}", f"tables={tables}",
                 f"image_root={world}", "batch_size=8"]) == 2
    assert f"{weights}: not a readable weights file (SafetensorError" in one_line_error(capsys, "train")
