"""model/benchmarks/linear_probe.py: the linear probe on image folders (the C search as clip_benchmark walks it,
known answers, input errors, the world)."""
import json
from pathlib import Path

import numpy as np
import pytest

from model.benchmarks import EvalConfig, evaluate, linear_probe
from tests_support import DictEncoder, coloured_png as _png, micro_eval_cli as _micro_cli


def _image_folder(root: Path, splits: dict[str, int], classes=("cat", "dog", "fox")) -> dict:
    """root/<split>/<class>/<i>.png; features: the class's one-hot plus a little per-image noise."""
    rng = np.random.default_rng(0)
    feats = {}
    for split, n in splits.items():
        for k, c in enumerate(classes):
            for i in range(n):
                p = _png(root / split / c / f"{i}.png", (80 * k, 60, 20 + i))
                feats[str(p)] = np.eye(len(classes))[k] + 0.05 * rng.normal(size=len(classes))
    return feats


def _world_image_folder(world: Path, out: Path) -> dict[str, str]:
    """An ImageFolder view of the world: every image under the kind of its largest shape; per class, every 4th
    image (by id) to test, the rest to train (a class with one image stays in train)."""
    by_class: dict[str, list[Path]] = {}
    for split in ("train", "val", "test"):
        for sc in json.loads((world / f"scenes_{split}.json").read_text()):
            big = max(sc["shapes"], key=lambda s: (s["box"][2] - s["box"][0]) * (s["box"][3] - s["box"][1]))
            by_class.setdefault(big["kind"], []).append(world / f"{split}2014" / sc["file_name"])
    label = {}
    for kind, paths in by_class.items():
        for i, p in enumerate(sorted(paths)):
            dest = out / ("test" if i % 4 == 3 else "train") / kind / p.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(p.read_bytes())
            label[str(dest)] = kind
    return label


def test_regularisation_search_walks_like_clip_benchmark():
    seen = []

    def score(i):
        seen.append(i)
        return -abs(i - 37)

    # starts 0,16,...,96 -> 32; then [24,32,40] -> 40; [36,40,44] -> 36; [34,36,38] -> 36 (tie: earlier); [35,36,37]
    assert linear_probe.search_regularisation(score) == 37
    assert seen == [0, 16, 32, 48, 64, 80, 96, 24, 40, 36, 44, 34, 38, 35, 37]  # each index scored once
    assert linear_probe.search_regularisation(lambda i: -i) == 0
    assert linear_probe.search_regularisation(lambda i: i) == 96
    assert linear_probe.C_GRID[0] == pytest.approx(1e-6) and linear_probe.C_GRID[-1] == pytest.approx(1e6)


def test_linear_probe_separable_features_score_one(tmp_path):
    feats = _image_folder(tmp_path, {"train": 10, "test": 4})
    (tmp_path / "train" / "cat" / "notes.txt").write_text("not an image")
    cfg = EvalConfig(model="fake", roots={"linear-probe": str(tmp_path)})
    r = evaluate(cfg, ["linear-probe"], enc=DictEncoder(feats))["benchmarks"]["linear-probe"]
    s = r["subsets"]["linear-probe"]
    assert (s["n"], s["correct"], s["accuracy"], s["classes"]) == (12, 12, 1.0, 3)
    assert (s["n_train"], s["n_val"]) == (24, 6)  # 20 % of the 30 train images carved for validation
    assert s["C"] in linear_probe.C_GRID.tolist() and s["val_accuracy"] == 1.0
    assert r["groups"]["top1"] == 1.0 and r["groups"]["mean_per_class_recall"] == 1.0
    assert r["settings"]["skipped_files"] == 1 and r["settings"]["validation"].startswith("random 20%")
    # a val/ split is used as given
    feats |= _image_folder(tmp_path, {"val": 2})
    r = evaluate(cfg, ["linear-probe"], enc=DictEncoder(feats))["benchmarks"]["linear-probe"]
    assert (r["subsets"]["linear-probe"]["n_train"], r["subsets"]["linear-probe"]["n_val"]) == (30, 6)
    assert r["settings"]["validation"] == "val split"


def test_linear_probe_input_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="train: image folder not found"):
        linear_probe.evaluate(DictEncoder(), tmp_path)
    _image_folder(tmp_path, {"train": 2, "test": 1}, classes=("cat", "dog"))
    _png(tmp_path / "test" / "emu" / "0.png")
    with pytest.raises(ValueError, match=r"class folder\(s\) \['emu'\] not in the train split"):
        linear_probe.evaluate(DictEncoder(), tmp_path)
    (tmp_path / "train" / "emu").mkdir()
    with pytest.raises(ValueError, match="emu: class folder without images"):
        linear_probe.evaluate(DictEncoder(), tmp_path)
    with pytest.raises(ValueError, match="too few to carve"):
        linear_probe.carve_validation(1)


def test_linear_probe_on_the_world(world, tmp_path):
    view = tmp_path / "view"
    label = _world_image_folder(world, view)
    kinds = sorted(set(label.values()))
    n_test = sum(Path(p).relative_to(view).parts[0] == "test" for p in label)
    oracle = DictEncoder({p: np.eye(len(kinds))[kinds.index(k)] for p, k in label.items()})
    r = linear_probe.evaluate(oracle, view)["subsets"]["linear-probe"]
    assert (r["n"], r["correct"], r["classes"]) == (n_test, n_test, len(kinds))
    out = tmp_path / "r.json"
    assert _micro_cli("--benchmark", "linear-probe", "--root", str(view), "--out", str(out)) == 0
    s = json.loads(out.read_text())["benchmarks"]["linear-probe"]["subsets"]["linear-probe"]
    assert s["n"] == n_test and s["n_train"] + s["n_val"] == len(label) - n_test
    assert 0 <= s["accuracy"] <= 1 and s["correct"] == round(s["accuracy"] * n_test)
    assert s["C"] in linear_probe.C_GRID.tolist() and str(f"{s['C']:.3g}") in s["C_tried"]


def test_linear_probe_reads_folders_as_zero_shot_does(tmp_path):
    """The reader shared with zero-shot (torchvision's ImageFolder): images below nested folders count; an image
    PIL cannot open is refused naming it, or with allow_missing left out and counted in settings."""
    feats = _image_folder(tmp_path, {"train": 10, "test": 4})
    feats[str(_png(tmp_path / "train" / "dog" / "more" / "extra.png", (80, 60, 20)))] = np.eye(3)[1]
    (tmp_path / "test" / "fox" / "broken.jpg").write_text("not a jpeg")
    cfg = EvalConfig(model="fake", roots={"linear-probe": str(tmp_path)})
    with pytest.raises(ValueError, match=r"linear-probe: 1 of 13 image file\(s\) .* cannot be read"):
        evaluate(cfg, ["linear-probe"], enc=DictEncoder(feats))
    cfg.allow_missing = True
    r = evaluate(cfg, ["linear-probe"], enc=DictEncoder(feats))["benchmarks"]["linear-probe"]
    assert r["settings"]["unreadable_images"] == 1 and r["settings"]["unreadable_examples"][0].endswith("broken.jpg")
    assert r["subsets"]["linear-probe"]["n"] == 12
    assert r["subsets"]["linear-probe"]["n_train"] + r["subsets"]["linear-probe"]["n_val"] == 31
