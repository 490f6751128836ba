"""model/benchmarks/__init__.py: ``evaluate`` and ``macco eval`` (results JSON, the results table, the activation
chosen, built and recorded, a missing checkpoint), and the reference files' skip rule."""
from __future__ import annotations

import json

import pytest

from macco.cli import main
from model.benchmarks import EvalConfig, evaluate
from tests_support import FakeEncoder, SHARED, micro_checkpoint as _micro_checkpoint, needs_shared, one_line_error


def test_needs_shared_skips_only_when_a_file_is_absent():
    """The reference files beside the repo (../shared) are absent in a bare clone: tests reading them skip."""
    absent = needs_shared("no/such/file.json").mark
    assert absent.args == (True,) and absent.kwargs["reason"] == f"needs {SHARED / 'no/such/file.json'} " \
                                                                  "(not in a bare clone)"
    assert needs_shared().mark.args == (False,)


def test_activation_is_chosen_built_and_recorded(tmp_path, world):
    from macco.cli import main
    from model.factory import resolve_arch
    from model.benchmarks import activation_kwargs, load_encoder

    ckpt = _micro_checkpoint(tmp_path)
    assert resolve_arch("ViT-B-32", "w.pt") == "ViT-B-32-quickgelu"  # auto: the training activation
    assert activation_kwargs(EvalConfig(activation="gelu")) == {"quick_gelu": False}
    built = {a: load_encoder(EvalConfig(model="macco-micro", checkpoint=str(ckpt), activation=a))[0].activation
             for a in ("auto", "quickgelu", "gelu")}
    assert built == {"auto": "gelu", "quickgelu": "quickgelu", "gelu": "gelu"}  # macco-micro's config: GELU
    out = tmp_path / "r.json"
    assert main(["eval", "--model", "macco-micro", "--checkpoint", str(ckpt), "--world", str(world),
                 "--benchmark", "sugarcrepe", "--activation", "quickgelu", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["activation"] == "quickgelu" and r["protocol"] == "authors"
    assert r["benchmarks"]["sugarcrepe"]["settings"]["activation"] == "quickgelu"
    assert r["benchmarks"]["sugarcrepe"]["settings"]["activation_setting"] == "quickgelu"
    with pytest.raises(ValueError, match="activation='relu'"):
        EvalConfig(activation="relu")


def test_cli_eval_json_and_results_table(world, tmp_path, capsys):
    import open_clip
    import torch

    from data_schemas import TABLES, read_table
    from macco.cli import main
    from model.factory import register_model_configs

    register_model_configs()
    torch.save({"state_dict": open_clip.create_model("macco-micro").state_dict()}, tmp_path / "m.pt")
    args = ["eval", "--model", "macco-micro", "--checkpoint", str(tmp_path / "m.pt"), "--world", str(world),
            "--benchmark", "all", "--out", str(tmp_path / "r.json"), "--results-table", str(tmp_path / "er"),
            "--vga-min-count", "1"]
    assert main(args) == 0
    out = json.loads((tmp_path / "r.json").read_text())
    assert set(out["benchmarks"]) == {"aro-vgr", "aro-vga", "coco-order", "sugarcrepe", "vl-checklist", "valse",
                                      "whatsup"}
    for b in out["benchmarks"].values():
        for v in b["subsets"].values():
            assert set(v) == {"n", "correct", "accuracy", "ties", "missing_images"}
    assert len(out["checkpoint_sha256"]) == 64
    rows = read_table(TABLES["eval_results"], tmp_path / "er").to_pylist()
    assert main(args) == 0
    assert len(read_table(TABLES["eval_results"], tmp_path / "er").to_pylist()) == 2 * len(rows)
    assert main(["eval", "--model", "macco-micro", "--random-init", "--benchmark", "sugarcrepe", "valse", "--root", "x"]) == 2
    with pytest.raises(ValueError, match="no root"):
        evaluate(EvalConfig(model="macco-micro"), ["sugarcrepe"], enc=FakeEncoder())


def test_eval_with_a_missing_checkpoint_file_is_one_line(world, tmp_path, capsys):
    assert main(["eval", "--model", "macco-micro", "--checkpoint", str(tmp_path / "x.pt"), "--benchmark",
                 "sugarcrepe", "--world", str(world)]) == 2
    assert "x.pt: checkpoint file not found" in one_line_error(capsys, "eval")


def _no_model_load(monkeypatch) -> list:
    """Record load_encoder calls instead of building a model (a call made means the check came too late)."""
    import model.benchmarks as mb

    calls = []

    def load(cfg):
        calls.append(cfg)
        raise AssertionError("the model was loaded before the inputs were checked")

    monkeypatch.setattr(mb, "load_encoder", load)
    return calls


def test_inputs_are_checked_before_the_model_loads(tmp_path, monkeypatch, capsys):
    """#44 item 3: a missing Winoground clean-ids file failed only after the whole pass (and `--benchmark all`
    lost every earlier result); now every requested benchmark's inputs are checked before the model loads."""
    from tests_support import blank_image

    calls = _no_model_load(monkeypatch)
    wg = tmp_path / "wg"
    (wg / "images").mkdir(parents=True)
    (wg / "examples.jsonl").write_text(json.dumps({"id": 0, "image_0": "a", "image_1": "b", "caption_0": "x",
                                                   "caption_1": "y"}) + "\n")
    blank_image(wg / "images" / "a.png")
    blank_image(wg / "images" / "b.png")
    ids = tmp_path / "no" / "clean.json"
    assert main(["eval", "--model", "macco-micro", "--random-init", "--benchmark", "winoground", "--root", str(wg),
                 "--winoground-clean-ids", str(ids)]) == 2
    assert f"{ids}: Winoground clean-ids file not found" in one_line_error(capsys, "eval") and calls == []

    # several benchmarks: one error naming each problem, still before the model
    sc = tmp_path / "sc"
    (sc / "add_att.json").parent.mkdir()
    (sc / "add_att.json").write_text("{}")
    roots = {"winoground": str(wg), "sugarcrepe": str(sc), "zeroshot": str(tmp_path / "absent"),
             "coco-order": str(tmp_path)}
    cfg = EvalConfig(model="macco-micro", roots=roots, winoground_clean_ids=str(ids))
    from model.benchmarks import InputsNotReady

    with pytest.raises(InputsNotReady) as err:
        evaluate(cfg, ["all"])
    msg = str(err.value)
    assert [n for n, _ in err.value.problems] == ["coco-order", "sugarcrepe", "sugarcrepe", "winoground",
                                                  "zeroshot"]
    for part in (f"{tmp_path / 'coco_karpathy_test.json'}: coco-order annotation file (order_files) not found",
                 "'attribute' lacks replace_att, swap_att", f"image folder {sc / 'val2017'} not found",
                 f"{ids}: Winoground clean-ids file not found", f"{tmp_path / 'absent'}: zeroshot root not found"):
        assert part in msg
    assert "\n" not in msg and calls == []
