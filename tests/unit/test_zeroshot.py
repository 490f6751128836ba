"""model/benchmarks/zeroshot.py: zero-shot classification on an image folder as clip_benchmark scores it (top-1,
top-5 from 5 classes, mean per-class recall, per-dataset templates) and the ImageFolder reader it shares with the
linear probe."""
import json

import numpy as np
import pytest
from PIL import Image

from model.benchmarks import EvalConfig, evaluate, zeroshot
from tests_support import DictEncoder, coloured_png as _png, micro_eval_cli

CLASSES = ("cat", "dog", "emu", "fox", "gnu", "hen")


def _onehot(k: int, n: int = len(CLASSES)) -> np.ndarray:
    return np.eye(n)[k]


class _Recorder:
    """Every text it is asked for, recorded; all features equal (every image ties: class 0 wins)."""

    def __init__(self):
        self.asked: list[str] = []

    def texts(self, texts):
        self.asked += list(texts)
        return np.ones((len(texts), 3)) / np.sqrt(3)

    def images(self, keys):
        return np.ones((len(keys), 3)) / np.sqrt(3)


def _folder(root, classes=("a", "b")):
    for c in classes:
        _png(root / c / "0.png")
    return root


def test_zeroshot_scores_as_clip_benchmark(tmp_path):
    """Known answers: 9 images over 6 classes of unequal size. top-1 7/9; top-5 8/9 (dog second, emu's odd image
    ranks emu last); mean per-class recall (1 + 0 + 1/2 + 1 + 1 + 1) / 6 = 0.75, not the top-1. Images below
    nested folders and with torchvision's other extensions (.tif, .ppm) count; other files are skipped."""
    root = tmp_path / "cifar10"  # the folder's name picks clip_benchmark's CIFAR-10 templates
    img = {}

    def add(path, feature):
        if path.suffix == ".png":
            _png(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8)).save(path)
        img[str(path)] = feature

    add(root / "cat" / "0.png", _onehot(0))
    add(root / "cat" / "nested" / "deeper" / "1.tif", _onehot(0))
    add(root / "cat" / "2.ppm", _onehot(0))
    add(root / "dog" / "0.png", 0.9 * _onehot(0) + 0.5 * _onehot(1))  # cat first, dog second
    add(root / "emu" / "0.png", _onehot(2))
    add(root / "emu" / "1.png", np.ones(6) - 2 * _onehot(2))  # emu ranked last of 6
    for k in (3, 4, 5):
        add(root / CLASSES[k] / "0.png", _onehot(k))
    (root / "dog" / "notes.txt").write_text("not an image")
    (root / "fox" / ".hidden.png").write_bytes(b"")
    templates = zeroshot.template_sets()["cifar10"]
    txt = {t.format(c=c): _onehot(k) for k, c in enumerate(CLASSES) for t in templates}
    b = evaluate(EvalConfig(roots={"zeroshot": str(root)}), ["zeroshot"], enc=DictEncoder(img, txt))
    r = b["benchmarks"]["zeroshot"]
    s = r["subsets"]["zeroshot"]
    assert (s["n"], s["correct"], s["classes"], s["templates"]) == (9, 7, 6, 18)
    assert s["top1"] == pytest.approx(7 / 9) and s["top5"] == pytest.approx(8 / 9)
    assert s["mean_per_class_recall"] == pytest.approx(0.75)
    assert r["groups"] == {"top1": s["top1"], "top5": s["top5"], "mean_per_class_recall": s["mean_per_class_recall"]}
    st = r["settings"]
    assert (st["dataset"], st["templates"], st["n_templates"], st["dataset_from"]) == (
        "cifar10", "cifar10", 18, "the root folder's name")
    assert "templates_note" not in st and st["skipped_files"] == 2 and st["unreadable_images"] == 0


def test_templates_follow_the_named_dataset(tmp_path):
    """clip_benchmark's set for the dataset (the folder's name, or ``zeroshot_dataset``, ``vtab/`` names looked
    up without the prefix); another name gets the 80 ImageNet templates (open_clip's OpenAI list), recorded;
    top-5 is None under 5 classes; classnames.txt names the classes in the prompts."""
    from open_clip.zero_shot_metadata import OPENAI_IMAGENET_TEMPLATES

    food = _folder(tmp_path / "Food101")
    (food / "classnames.txt").write_text("apple pie\nbaby back ribs\n")
    enc = _Recorder()
    r = zeroshot.evaluate(enc, food)
    assert enc.asked == ["a photo of apple pie, a type of food.", "a photo of baby back ribs, a type of food."]
    assert r["settings"]["templates"] == "food101" and r["settings"]["class_names"] == "classnames.txt"
    assert r["subsets"]["zeroshot"]["top5"] is None and r["groups"]["top5"] is None

    other = _folder(tmp_path / "my_photos")
    enc = _Recorder()
    r = evaluate(EvalConfig(roots={"zeroshot": str(other)}), ["zeroshot"], enc=enc)["benchmarks"]["zeroshot"]
    assert enc.asked == [t("a") for t in OPENAI_IMAGENET_TEMPLATES] + [t("b") for t in OPENAI_IMAGENET_TEMPLATES]
    assert r["settings"]["templates"] == "imagenet1k" and "'my_photos'" in r["settings"]["templates_note"]
    enc = _Recorder()
    r = evaluate(EvalConfig(roots={"zeroshot": str(other)}, zeroshot_dataset="vtab/CIFAR100"), ["zeroshot"],
                 enc=enc)["benchmarks"]["zeroshot"]
    assert r["settings"]["templates"] == "cifar100" and r["settings"]["dataset_from"] == "zeroshot_dataset"
    assert enc.asked[:2] == ["a photo of a a.", "a blurry photo of a a."] and len(enc.asked) == 2 * 18
    assert {"imagenet1k", "cifar10", "cifar100", "food101", "sun397", "cars", "fgvc_aircraft", "dtd", "pets",
            "caltech101", "flowers", "stl10", "eurosat", "gtsrb"} <= set(zeroshot.template_sets())


def test_image_folder_reader(tmp_path):
    """torchvision's ImageFolder: a class per first-level folder, images found recursively; hidden folders are not
    classes; an unreadable image is an error naming it unless allowed, then left out and counted."""
    root = _folder(tmp_path / "set", ("b", "a"))
    _png(root / "a" / "x" / "y" / "1.webp")
    (root / ".ipynb_checkpoints").mkdir()
    _png(root / "a" / ".ipynb_checkpoints" / "0-checkpoint.png")  # a hidden folder's copy: not an image of a
    (root / "b" / "broken.jpg").write_text("not a jpeg")
    with pytest.raises(ValueError, match=r"zeroshot: 1 of 4 image file\(s\) .* cannot be read .*broken.jpg"):
        zeroshot.read_image_folder(root)
    f = zeroshot.read_image_folder(root, allow_unreadable=True)
    assert f.classes == ["a", "b"] and f.labels == [0, 0, 1]
    assert f.files == [str(root / "a" / "0.png"), str(root / "a" / "x" / "y" / "1.webp"), str(root / "b" / "0.png")]
    assert f.unreadable == [str(root / "b" / "broken.jpg")]
    enc = _Recorder()
    r = evaluate(EvalConfig(roots={"zeroshot": str(root)}, allow_missing=True), ["zeroshot"], enc=enc)
    assert r["benchmarks"]["zeroshot"]["settings"]["unreadable_images"] == 1
    assert r["benchmarks"]["zeroshot"]["subsets"]["zeroshot"]["n"] == 3
    (root / "c").mkdir()
    (root / "c" / "readme.md").write_text("x")
    with pytest.raises(ValueError, match="c: class folder without images"):
        zeroshot.read_image_folder(root, open_images=False)
    with pytest.raises(FileNotFoundError, match="no class folders"):
        zeroshot.read_image_folder(tmp_path / "set" / "a" / "x" / "y")


def test_zeroshot_with_an_open_clip_model(tmp_path):
    """The real encoder, directly and through `macco eval --zeroshot-dataset`."""
    import open_clip
    import torch

    from model.factory import register_model_configs
    from model.benchmarks.scoring import Encoder

    for cls, colour in (("red_thing", (220, 20, 20)), ("blue_thing", (20, 20, 220))):
        (tmp_path / cls).mkdir()
        for i in range(3):
            Image.new("RGB", (32, 32), colour).save(tmp_path / cls / f"{i}.png")
    (tmp_path / "classnames.txt").write_text("blue thing\nred thing\n")
    register_model_configs()
    torch.manual_seed(0)
    model, _, pre = open_clip.create_model_and_transforms("macco-micro")
    r = zeroshot.evaluate(Encoder(model, pre, open_clip.get_tokenizer("macco-micro")), tmp_path)
    s = r["subsets"]["zeroshot"]
    assert s["n"] == 6 and s["classes"] == 2 and s["templates"] == 80 and s["top5"] is None
    assert s["top1"] in {0.0, 0.5, 1.0} and s["mean_per_class_recall"] == s["top1"]  # 3 images a class
    out = tmp_path / "r.json"  # a file beside the class folders: not a class
    assert micro_eval_cli("--benchmark", "zeroshot", "--root", str(tmp_path), "--zeroshot-dataset", "STL10",
                          "--out", str(out)) == 0
    r = json.loads(out.read_text())["benchmarks"]["zeroshot"]
    assert (r["settings"]["templates"], r["subsets"]["zeroshot"]["templates"]) == ("stl10", 2)
    assert set(r["groups"]) == {"top1", "top5", "mean_per_class_recall"}
    (tmp_path / "classnames.txt").write_text("only one\n")
    with pytest.raises(ValueError, match="1 names for 2 class folders"):
        zeroshot.evaluate(Encoder(model, pre, open_clip.get_tokenizer("macco-micro")), tmp_path)


def test_top5_only_with_more_than_five_classes():
    """With 5 classes every image's top 5 holds its class: 1.0 by construction (clip_benchmark reports it), not a
    measurement, so it is None; with 6 it is measured."""
    import numpy as np

    from model.benchmarks.zeroshot import metrics

    rng = np.random.default_rng(0)
    five = metrics(rng.normal(size=(8, 5)), np.arange(8) % 5, 5)
    assert five["top5"] is None and five["top1"] is not None
    six = metrics(-np.eye(6)[np.arange(6)], np.arange(6), 6)  # the true class always ranked last
    assert six["top5"] == 0.0
