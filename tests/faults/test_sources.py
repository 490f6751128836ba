"""#28, every input problem is an error row or one line, never a traceback and never silent: CSV quoting and
non-UTF-8 bytes in every caption reader, NaN / inverted boxes in `macco masks`, images resized after the tables
were made, config values out of range or written twice, report inputs of the wrong shape, duplicate ids. Each
test injects exactly one fault from the issue and fails on the code before the fix."""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from data_schemas import TABLES, read_table, write_table
from macco.cli import main
from tests_support import write_shard

CAPTION = "a red circle left of a blue square"


def one_line_error(capsys, verb: str) -> str:
    from tests_support import without_logging_errors

    err = without_logging_errors(capsys.readouterr().err)
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith(f"macco {verb}: "), err
    return err


def png(path: Path, size=(40, 30)) -> Path:
    Image.new("RGB", size, (200, 10, 10)).save(path)
    return path


def errors(out: Path) -> list[dict]:
    return read_table(TABLES["errors"], out / "errors").to_pylist()


def captions(out: Path) -> list[dict]:
    return read_table(TABLES["captions"], out / "captions").to_pylist()


# ---- CSV quoting and non-UTF-8 bytes -----------------------------------------------------------------------
def test_csv_unclosed_quote_is_an_error_row_and_the_next_rows_are_kept(tmp_path, capsys):
    """The issue: exit 0, one caption swallowed the next line, that row lost, no error row."""
    png(tmp_path / "a.png")
    (tmp_path / "d.tsv").write_text('filepath\ttitle\na.png\t"a red circle\na.png\ta blue square\n'
                                    'a.png\ta green cross\n')
    assert main(["captions", str(tmp_path / "d.tsv"), "--source", "csv", "--out", str(tmp_path / "T")]) == 0
    assert [(c["caption_id"], c["caption"]) for c in captions(tmp_path / "T")] == [
        (1, "a blue square"), (2, "a green cross")]
    [e] = errors(tmp_path / "T")
    assert (e["item_id"], e["reason"]) == ("0", "csv_quoting") and "d.tsv: line 2" in e["message"]
    assert "csv_quoting=1" in capsys.readouterr().out


def test_csv_with_non_utf8_bytes_is_an_error_row_not_a_traceback(tmp_path, capsys):
    png(tmp_path / "a.png")
    (tmp_path / "d.tsv").write_bytes(b"filepath\ttitle\na.png\ta caf\xe9 table\na.png\ta blue square\n")
    assert main(["captions", str(tmp_path / "d.tsv"), "--source", "csv", "--out", str(tmp_path / "T")]) == 0
    assert [c["caption"] for c in captions(tmp_path / "T")] == ["a blue square"]
    [e] = errors(tmp_path / "T")
    assert e["reason"] == "not_utf8" and "d.tsv: line 2" in e["message"] and "byte 11" in e["message"]
    assert "\ufffd" not in json.dumps(captions(tmp_path / "T"))


def test_jsonl_with_non_utf8_bytes_is_an_error_row_for_parse_and_folder_sources(tmp_path, capsys):
    png(tmp_path / "a.png")
    good = json.dumps({"id": 2, "image_id": 1, "caption": CAPTION, "file_name": "a.png"}).encode()
    (tmp_path / "c.jsonl").write_bytes(b'{"id": 1, "image_id": 1, "caption": "caf\xe9"}\n' + good + b"\n")
    assert main(["parse", str(tmp_path / "c.jsonl"), "--images", str(tmp_path), "--out", str(tmp_path / "P"),
                 "--model", "macco-micro"]) == 0
    assert [c["caption_id"] for c in captions(tmp_path / "P")] == [2]
    assert [(e["item_id"], e["reason"]) for e in errors(tmp_path / "P")] == [("line:1", "not_utf8")]
    folder = tmp_path / "f.jsonl"
    folder.write_bytes(b'{"file_name": "a.png", "caption": "caf\xe9"}\n{"file_name": "a.png", "caption": "ok"}\n')
    assert main(["captions", str(folder), "--source", "folder", "--out", str(tmp_path / "F")]) == 0
    assert [c["caption"] for c in captions(tmp_path / "F")] == ["ok"]
    assert [e["reason"] for e in errors(tmp_path / "F")] == ["not_utf8"]


def test_webdataset_non_utf8_txt_and_json_are_error_rows_never_u_fffd(tmp_path, capsys):
    """The issue: .txt silently stored with U+FFFD; .json aborted the whole read."""
    buf = io.BytesIO()
    Image.new("RGB", (20, 10)).save(buf, format="PNG")
    img = buf.getvalue()
    shard = write_shard(tmp_path / "s.tar", [
        {"__key__": "a", "png": img, "txt": b"caf\xe9"},
        {"__key__": "b", "png": img, "json": b'{"caption": "caf\xe9"}'},
        {"__key__": "c", "png": img, "txt": CAPTION}])
    assert main(["captions", str(shard), "--source", "webdataset", "--out", str(tmp_path / "T")]) == 0
    assert [c["caption"] for c in captions(tmp_path / "T")] == [CAPTION]
    errs = errors(tmp_path / "T")
    assert [(e["item_id"], e["reason"]) for e in errs] == [("0", "not_utf8"), ("1", "not_utf8")]
    assert "sample a: .txt is not UTF-8" in errs[0]["message"] and "sample b: .json" in errs[1]["message"]


# ---- bad boxes in macco masks ------------------------------------------------------------------------------
def test_masks_nan_and_inverted_boxes_are_error_rows(world_tables, tmp_path, capsys):
    """The issue: a NaN box was a traceback ('cannot convert float NaN to integer'), an inverted box silently an
    empty mask."""
    t = tmp_path / "T"
    shutil.copytree(world_tables["captions"], t / "captions")
    regions = read_table(TABLES["regions"], world_tables["regions"]).to_pylist()
    regions[0]["box_xyxy"] = [float("nan"), 1.0, 5.0, 5.0]
    x1, y1, x2, y2 = regions[1]["box_xyxy"]
    regions[1]["box_xyxy"] = [x2, y1, x1, y2]  # inverted
    write_table(TABLES["regions"], t / "regions", TABLES["regions"].from_rows(regions))
    assert main(["masks", str(t), "--model", "macco-micro", "--out", str(t / "m")]) == 0
    errs = errors(t / "m")
    assert sorted(e["reason"] for e in errs) == ["box_not_finite", "box_outside_image"]
    assert {e["stage"] for e in errs} == {"masks"}
    bad = {(r["caption_id"], r["concept_id"]) for r in regions[:2]}
    masks = read_table(TABLES["patch_masks"], t / "m" / "patch_masks").to_pylist()
    assert all(m["patch_idx"] for m in masks)  # no silently empty mask
    assert {(m["caption_id"], m["concept_id"]) for m in masks} >= {
        (r["caption_id"], r["concept_id"]) for r in regions[2:]}
    out = capsys.readouterr().out
    assert "masks/box_not_finite=1" in out and f"wrote {t / 'm' / 'patch_masks'}" in out
    assert bad  # the two phrases lost a box each; their other boxes (if any) still make masks


# ---- training checks the images against the tables ----------------------------------------------------------
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


# ---- config values ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("override,message", [
    ("batch_size=0", "batch_size: 0 must be > 0"),  # was a ZeroDivisionError
    ("max_steps=-5", "max_steps: -5 must be > 0"),  # was a misleading "no full batch"
    ("lr_clip=-1", "lr_clip: -1.0 must be >= 0"),  # trained and reported Completed
    ("rect_prob=1.5", "rect_prob: 1.5 must be in [0, 1]"),
    ("loss_weights={image_reconstruction_loss: -250}", "loss_weights.image_reconstruction_loss: -250 must be >= 0"),
    ("lr_clip=.inf", "lr_clip: inf must be finite"),  # passed; training died at step 0 with NonFiniteLoss
    ("loss_weights={contrast_loss: .inf}", "loss_weights.contrast_loss: inf must be finite"),
    ("rect_ratio=.nan", "rect_ratio: nan must be finite"),
])
def test_train_config_out_of_range_is_one_line(tmp_path, capsys, override, message):
    assert main(["train", override, f"out_dir={tmp_path / 'r'}"]) == 2
    assert message in one_line_error(capsys, "train")


def test_flow_config_errors_are_one_line_from_the_cli(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntrain:\n  common: {batch_size: 0}\n")
    assert main(["run", "--config", str(bad)]) == 2
    assert "config train.common batch_size: 0 must be > 0" in one_line_error(capsys, "run")
    bad.write_text("name: x\ntrain:\n  seeds: [0]\nworld: {seed: 1}\ntrain:\n  seeds: [1]\n")  # a section twice
    assert main(["run", "--config", str(bad)]) == 2
    assert "line 5: key 'train' is written twice" in one_line_error(capsys, "run")
    bad.write_text("train: {seeds: [0, 0]}\n")
    assert main(["run", "--config", str(bad)]) == 2
    assert "train.seeds" in one_line_error(capsys, "run")
    assert main(["run", "--config", str(bad), "--stages", "evaluat"]) == 2
    assert "unknown stage(s) ['evaluat']" in one_line_error(capsys, "run")
    (tmp_path / "t.yaml").write_text("train: {batch_size: 8}\ntrain: {batch_size: 16}\n")
    assert main(["train", "--config", str(tmp_path / "t.yaml")]) == 2
    assert "written twice" in one_line_error(capsys, "train")


def test_flow_config_error_fails_the_flow_run_with_one_line(harness, tmp_path):
    """A deployment run (no CLI in front): the flow run fails with the config error as its message."""
    from flows.pipeline import macco_pipeline

    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  common: {lr_clip: -1}\n")
    state = macco_pipeline(config=str(bad), return_state=True)
    assert state.is_failed() and state.message.startswith("config error: config train.common lr_clip: -1")


# ---- report inputs of the wrong shape -----------------------------------------------------------------------
@pytest.mark.parametrize("bench,where", [
    ({"groups": "0.5"}, "benchmarks.sugarcrepe.groups: a mapping"),  # was a KeyError traceback
    ({"groups": [0.5]}, "benchmarks.sugarcrepe.groups: a mapping"),  # was an AttributeError traceback
    ({"groups": {"relation": float("nan")}}, "groups.relation: nan is not a finite number"),  # was "nan"
    ({"groups": {"relation": 0.5}, "subsets": {"replace_rel": {"n": "ten", "accuracy": 0.5}}},
     "subsets.replace_rel.n: 'ten' is not a count"),
])
def test_report_inputs_of_the_wrong_shape_are_one_line(tmp_path, capsys, bench, where):
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"benchmarks": {"sugarcrepe": bench}}))
    assert main(["report", f"macco={f}", "--out", str(tmp_path / "o")]) == 2
    assert where in one_line_error(capsys, "report")
    assert not (tmp_path / "o" / "results.md").exists()


def test_report_inputs_of_other_shapes_and_an_out_file_are_one_line_leaving_nothing(tmp_path, capsys):
    """label: 5, missing_images: "x", case strings shorter than the control's, --out an existing file: TypeError,
    ValueError, FileExistsError tracebacks, and an empty folder left."""
    good = {"sugarcrepe": {"groups": {"relation": 0.5}, "subsets": {"replace_rel": {"n": 4, "accuracy": 0.5}},
                           "cases": {"relation": "1010"}}}
    (tmp_path / "c.json").write_text(json.dumps({"benchmarks": good}))
    cases = [({"label": 5, "benchmarks": good}, "label: '5' is not a run name"),
             ({"benchmarks": {"sugarcrepe": {**good["sugarcrepe"], "subsets": {
                 "replace_rel": {"n": 4, "accuracy": 0.5, "missing_images": "x"}}}}},
              "subsets.replace_rel.missing_images: 'x' is not a count"),
             ({"benchmarks": {"sugarcrepe": {**good["sugarcrepe"], "cases": {"relation": "10"}}}},
              "benchmarks.sugarcrepe.cases.relation has 2 cases")]
    for run, where in cases:
        (tmp_path / "m.json").write_text(json.dumps(run))
        assert main(["report", f"clip-ft={tmp_path / 'c.json'}", f"macco={tmp_path / 'm.json'}", "--out",
                     str(tmp_path / "o")]) == 2
        assert where in one_line_error(capsys, "report")
        assert not (tmp_path / "o").exists()
    (tmp_path / "afile").write_text("mine")
    assert main(["report", f"clip-ft={tmp_path / 'c.json'}", "--out", str(tmp_path / "afile")]) == 2
    assert "afile: is a file, not a folder (--out)" in one_line_error(capsys, "report")
    assert (tmp_path / "afile").read_text() == "mine"


# ---- one duplicate-id rule ----------------------------------------------------------------------------------
def test_coco_json_with_duplicate_annotation_ids_is_refused_as_jsonl_is(tmp_path, capsys):
    """The issue: accepted with rc 0, then 5 checks failed (the JSONL reader refused such ids)."""
    png(tmp_path / "one.png")
    coco = {"images": [{"id": 1, "file_name": "one.png", "width": 40, "height": 30}],
            "annotations": [{"id": 7, "image_id": 1, "caption": CAPTION}, {"id": 7, "image_id": 1, "caption": "x"}]}
    (tmp_path / "captions_train2014.json").write_text(json.dumps(coco))
    assert main(["parse", str(tmp_path / "captions_train2014.json"), "--out", str(tmp_path / "o")]) == 2
    assert "annotations[1]: id 7 already used at annotations[0]" in one_line_error(capsys, "parse")
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps({"id": 7, "image_id": 1, "caption": c})
                                                for c in (CAPTION, "x")))
    assert main(["parse", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "o")]) == 2
    assert "line 2: id 7 already used at line 1" in one_line_error(capsys, "parse")


def test_parse_of_a_clean_file_drops_an_earlier_files_input_errors(tmp_path, capsys):
    """`macco parse FILE --out P` replaces P/captions with FILE's rows: the captions-stage errors of the file
    parsed there before are not FILE's and go with it (parse's own rows are rewritten as always)."""
    png(tmp_path / "a.png")
    good = json.dumps({"id": 2, "image_id": 1, "caption": CAPTION, "file_name": "a.png"})
    (tmp_path / "bad.jsonl").write_bytes(b'{"id": 1, "image_id": 1, "caption": "caf\xe9"}\n' + good.encode() + b"\n")
    (tmp_path / "good.jsonl").write_text(good + "\n")
    for name, reasons in (("bad.jsonl", ["not_utf8"]), ("good.jsonl", [])):
        assert main(["parse", str(tmp_path / name), "--images", str(tmp_path), "--out", str(tmp_path / "P"),
                     "--model", "macco-micro"]) == 0
        assert [e["reason"] for e in errors(tmp_path / "P") if e["stage"] == "captions"] == reasons, name
    assert "errors: 0" in capsys.readouterr().out


def test_captions_into_a_used_folder_counts_its_own_errors(tmp_path, capsys):
    """`macco captions` printed the errors table's row count, other stages' rows included, and its 'no image
    found' check compared this stage's missing images with that count."""
    png(tmp_path / "a.png")
    (tmp_path / "d.tsv").write_text("filepath\ttitle\nnope.png\ta red circle\n")
    spec = TABLES["errors"]
    write_table(spec, tmp_path / "T" / "errors",
                spec.from_rows([dict(stage="parse", item_id="9", reason="empty_caption", message="x")]))
    assert main(["captions", str(tmp_path / "d.tsv"), "--source", "csv", "--out", str(tmp_path / "T")]) == 2
    cap = capsys.readouterr()
    assert "errors: 1 missing_image=1" in cap.out and "none of the 1 captions' images" in cap.err


@pytest.mark.parametrize("seeds", [[-1], [0, -3]])
def test_a_runs_own_negative_seed_is_one_line_as_the_flows_is(seeds):
    from data_schemas.config import ConfigError
    from flows.config import train_plan

    with pytest.raises(ConfigError, match=r"train.runs.m.seeds: .* integers >= 0"):
        train_plan({"runs": {"m": {"mode": "macco", "seeds": seeds}}})


def test_a_version_1_rows_null_protocol_reads_the_same_upgraded_and_in_the_view(tmp_path, capsys):
    """The view maps a null protocol to '' and the upgrade wrote 'None': one history, two spellings."""
    from data_schemas.eval_results import LEGACY_SPEC, upgrade_v1

    old = [dict(benchmark="aro", subset="vg_relation", model_id="m", n=1, correct=1, accuracy=1.0, ties=0,
                missing_images=0, checkpoint_sha256="s", config='{"protocol": null, "activation": null}',
                created="2026-01-01T00:00:00Z")]
    write_table(LEGACY_SPEC, tmp_path / "eval_results", LEGACY_SPEC.from_rows(old))
    assert main(["sql", "select protocol, activation from eval_results", "--root", str(tmp_path), "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [","]
    [row] = upgrade_v1(LEGACY_SPEC.from_rows(old)).to_pylist()
    assert (row["protocol"], row["activation"]) == ("", "")


# ---- a read-only artifacts folder ------------------------------------------------------------------------------
def test_read_only_outputs_are_one_line_before_any_work(world, tmp_path, capsys, monkeypatch):
    """Every writer ended in an `OSError [Errno 30]` traceback, and `macco eval --results-table` ran the whole
    evaluation before failing at the lock, losing the work."""
    import model.benchmarks as benchmarks
    from tests_support import read_only_folder

    with read_only_folder(tmp_path / "ro") as ro:
        assert main(["captions", str(world), "--out", str(ro / "T")]) == 2
        assert f"{ro / 'T'}: cannot write here ({ro} is read-only" in one_line_error(capsys, "captions")
        monkeypatch.setattr(benchmarks, "load_encoder", lambda cfg: pytest.fail("evaluated before checking"))
        assert main(["eval", "--model", "macco-micro", "--random-init", "--benchmark", "aro-vgr", "--world", str(world),
                     "--results-table", str(ro / "eval_results")]) == 2
        assert "eval_results: cannot write here" in one_line_error(capsys, "eval")
        assert main(["world", "--out", str(ro / "w"), "--images", "4"]) == 2
        assert "cannot write here" in one_line_error(capsys, "world")
        (tmp_path / "c.yaml").write_text(f"artifacts: {ro / 'artifacts'}\nworld: {{images: 4}}\n")
        import subprocess
        import sys

        from tests_support import prefect_env

        r = subprocess.run([sys.executable, "-m", "macco.cli", "run", "--config", str(tmp_path / "c.yaml"),
                            "--stages", "world"], capture_output=True, text=True, env=prefect_env(tmp_path))
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert f"macco run: {ro / 'artifacts'}/world/" in r.stderr and f"cannot write here ({ro} is read-only" in r.stderr


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
