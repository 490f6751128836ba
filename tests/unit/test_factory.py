"""#31, a new user's first hour: one-line errors for the usual slips, truthful logs, the pictures labelled. Each
test drives the real CLI (or the function the CLI calls) on a tiny world."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from data_schemas import TABLES, read_table
from macco.cli import main

REPO = Path(__file__).resolve().parents[2]


def one_line_error(capsys, verb: str) -> str:
    from tests_support import without_logging_errors

    err = without_logging_errors(capsys.readouterr().err)
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith(f"macco {verb}: "), err
    return err


@pytest.fixture()
def tables(world, world_tables, tmp_path):
    """The session world's tables copied where a test may add to them (captions, parse, ground, masks)."""
    t = tmp_path / "T"
    for name in ("captions", "scene_graphs", "token_masks"):
        shutil.copytree(world_tables[name], t / name)
    shutil.copytree(world_tables["root"] / "ground", t / "ground")
    return t


# ---- one-line errors ----------------------------------------------------------------------------------------
def test_eval_with_a_missing_checkpoint_file_is_one_line(world, tmp_path, capsys):
    assert main(["eval", "--model", "macco-micro", "--checkpoint", str(tmp_path / "x.pt"), "--benchmark",
                 "sugarcrepe", "--world", str(world)]) == 2
    assert "x.pt: checkpoint file not found" in one_line_error(capsys, "eval")


def test_show_masks_with_an_unknown_caption_id_is_one_line(world, tables, tmp_path, capsys):
    assert main(["show-masks", str(tables), "--images", str(world), "--caption-id", "987654",
                 "--model", "macco-micro", "--out", str(tmp_path / "m.png")]) == 2
    err = one_line_error(capsys, "show-masks")
    assert "caption id 987654 is not in the captions table" in err and "ids " in err


def test_a_flow_config_given_to_macco_train_says_how_to_run_it(capsys):
    assert main(["train", "--config", str(REPO / "configs" / "demo.yaml")]) == 2
    err = one_line_error(capsys, "train")
    assert "is a flow config" in err and "macco run --config" in err and "train-example.yaml" in err


def test_the_train_example_config_is_a_valid_train_section():
    from model.train_config import load_config

    cfg = load_config(REPO / "configs" / "train-example.yaml")
    assert cfg.mode == "macco" and set(cfg.tables) == {"captions", "token_masks", "scene_graphs", "regions"}


def test_a_single_stage_run_without_its_upstream_fails_with_one_line(harness, tmp_path, capsys):
    """The reevaluate deployment on a config that was never trained: one line naming the missing stage (the
    flow run's message; `macco run` prints it, exit 2), no traceback."""
    import yaml

    from flows.pipeline import StageMissing, macco_pipeline

    cfg = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())
    cfg["artifacts"] = str(tmp_path / "artifacts")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    state = macco_pipeline(config=str(tmp_path / "c.yaml"), stages=["evaluate", "report"], force=["evaluate"],
                           return_state=True)
    assert state.is_failed() and "\n" not in state.message
    assert state.message.startswith("stage 'world' is not selected and has no complete output")
    # every stage it lacks named at once, not one retry at a time
    assert "(and the stages after it that are not selected: captions, parse, ground, masks, validate, " \
           "train); run them first" in state.message
    with pytest.raises(StageMissing):
        state.result()


# ---- sources that do not fit the command ---------------------------------------------------------------------
def test_annotations_backend_on_captions_that_are_not_coco_refuses(world, tmp_path, capsys):
    """Today: exit 0, 0 regions, every phrase a no_box row."""
    Image.new("RGB", (40, 30)).save(tmp_path / "a.png")
    (tmp_path / "d.tsv").write_text("filepath\ttitle\na.png\ta red circle left of a blue square\n")
    assert main(["captions", str(tmp_path / "d.tsv"), "--source", "csv", "--out", str(tmp_path / "T")]) == 0
    assert main(["parse", str(tmp_path / "T" / "captions"), "--out", str(tmp_path / "T"),
                 "--model", "macco-micro"]) == 0
    capsys.readouterr()
    assert main(["ground", str(tmp_path / "T"), "--images", str(tmp_path), "--instances", str(world)]) == 2
    assert "annotations backend reads COCO instance boxes" in one_line_error(capsys, "ground")
    assert not (tmp_path / "T" / "ground").exists()


def test_csv_whose_images_are_all_missing_says_so(tmp_path, capsys):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.tsv").write_text("filepath\ttitle\nimgs/a.png\ta red circle\nimgs/b.png\ta cat\n")
    assert main(["captions", str(tmp_path / "sub" / "d.tsv"), "--source", "csv", "--out", str(tmp_path / "T")]) == 2
    err = capsys.readouterr().err
    assert "none of the 2 captions' images was found under" in err and "--image-root" in err
    assert len(read_table(TABLES["errors"], tmp_path / "T" / "errors")) == 2  # the rows are still there


def test_folder_source_pointed_at_a_folder_explains(tmp_path, capsys):
    assert main(["captions", str(tmp_path), "--source", "folder", "--out", str(tmp_path / "T")]) == 2
    assert '--source folder reads a JSONL file with one {"file_name"' in one_line_error(capsys, "captions")


# ---- truthful logs --------------------------------------------------------------------------------------------
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


def test_inspect_summary_names_its_columns(tables, capsys):
    assert main(["inspect", str(tables)]) == 0
    out = capsys.readouterr().out
    assert "top_relations:\n  relation | count\n" in out and "masked_patches_per_phrase:\n  grid | mean | min | max" in out


def test_report_names_a_group_it_drops(tmp_path, capsys):
    """A benchmark present without the report's group value (e.g. every VG-A group under vga_min_count)."""
    res = {"benchmarks": {"aro-vga": {"subsets": {"x": {"n": 3, "accuracy": 0.5}}, "groups": {}},
                          "sugarcrepe": {"subsets": {"replace_rel": {"n": 10, "accuracy": 0.6}},
                                         "groups": {"relation": 0.6}}}}
    (tmp_path / "r.json").write_text(json.dumps(res))
    assert main(["report", f"macco={tmp_path / 'r.json'}", "--out", str(tmp_path / "o")]) == 0
    md = (tmp_path / "o" / "results.md").read_text()
    assert "Not reported (the benchmark ran but gave no value for the group" in md and "ARO VG-Attribution (macro) (macco)" in md


# ---- pictures -------------------------------------------------------------------------------------------------
def test_show_masks_colours_each_phrase_as_its_tokens(world, tables, tmp_path):
    from pipeline.show import PHRASE_COLOURS

    sg = read_table(TABLES["scene_graphs"], tables / "scene_graphs").to_pylist()
    cid = next(r["caption_id"] for r in sg if r["kind"] == "relation")
    phrases = [r for r in sg if r["caption_id"] == cid and r["kind"] != "object"]
    assert main(["show-masks", str(tables), "--images", str(world), "--caption-id", str(cid),
                 "--model", "macco-micro", "--out", str(tmp_path / "m.png")]) == 0
    with Image.open(tmp_path / "m.png") as im:
        rgb = im.convert("RGB")
        half = rgb.width - 520  # the picture | the text
        pic = set(rgb.crop((0, 0, half, rgb.height)).getdata())
        text = set(rgb.crop((half, 0, rgb.width, rgb.height)).getdata())
    for colour in PHRASE_COLOURS[:len(phrases)]:  # each phrase's colour outlines its box and boxes its tokens
        assert colour in pic and colour in text, colour


def test_world_preview_shows_every_caption_whole_with_the_image_id():
    from pipeline.world import preview_lines

    caps = ["a small red circle sitting to the left side of a large blue hexagon inside a green square", "x"]
    lines = preview_lines(17, caps, wrap=30)
    assert lines[0] == "image 17"
    joined = " ".join(ln.strip() for ln in lines[1:])
    assert joined == "- " + caps[0] + " - x" and all(len(ln) <= 30 for ln in lines)


def test_results_figure_marks_the_paired_test_and_the_spread():
    from pipeline.report import results_figure

    table = {"clip-ft": {"SugarCrepe relation": (0.55, 0.02, 3, 100)},
             "macco": {"SugarCrepe relation": (0.45, 0.03, 3, 100)}}
    fig = results_figure(table, ["SugarCrepe relation"], "t", {("macco", "SugarCrepe relation"): "▼"})
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["▼"]
    from matplotlib.container import BarContainer, ErrorbarContainer

    assert sum(isinstance(c, BarContainer) for c in ax.containers) == 2
    assert sum(isinstance(c, ErrorbarContainer) for c in ax.containers) == 2  # the sd over seeds


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
                 f"image_root={world}"]) == 2
    assert f"{bad}: {expected[kind]}" in one_line_error(capsys, "train")


def test_eval_without_weights_is_refused_and_the_worlds_settings_apply(world, tmp_path, capsys):
    """`macco eval` without --checkpoint scored a randomly initialised model and exited 0; outside the flow
    --vga-min-count defaulted to 25 (the flow: 5), so on a small world VG-Attribution vanished and the report said
    no case was scored although 8 were."""
    assert main(["eval", "--model", "macco-micro", "--benchmark", "aro-vga", "--world", str(world)]) == 2
    assert "no --checkpoint for macco-micro: that would evaluate a randomly initialised model" in \
        one_line_error(capsys, "eval")
    out = tmp_path / "r.json"
    assert main(["eval", "--model", "macco-micro", "--random-init", "--benchmark", "aro-vga", "--world", str(world),
                 "--out", str(out)]) == 0
    assert json.loads(out.read_text())["benchmarks"]["aro-vga"]["groups"]["min_count"] == 5  # the world's setting
    assert main(["eval", "--model", "macco-micro", "--random-init", "--benchmark", "aro-vga", "--world", str(world),
                 "--vga-min-count", "2", "--out", str(out)]) == 0  # an explicit flag wins
    assert json.loads(out.read_text())["benchmarks"]["aro-vga"]["groups"]["min_count"] == 2


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
    assert main(["eval", "--model", "ViT-B-32", "--checkpoint", str(tmp_path / "export.pt"), "--benchmark", "aro-vgr",
                 "--root", str(tmp_path)]) == 2
    assert "these weights do not fit architecture 'ViT-B-32-quickgelu'; the file was exported from 'macco-micro' " \
           "(pass --model macco-micro)" in one_line_error(capsys, "eval")
