"""Zero-shot classification on an ImageFolder, as LAION's clip_benchmark scores it (the paper's general-ability
check), and the ImageFolder reader the linear probe shares.

The rule (clip_benchmark ``clip_benchmark/metrics/zeroshot_classification.py``, LAION-AI/CLIP_benchmark):
- a class's weight is the mean of its prompts' L2-normalised text features, renormalised
  (``zero_shot_classifier``); the prompts are the dataset's templates with ``{c}`` the class name;
- an image ranks the classes by the cosine of its normalised feature with each weight (``run_classification``);
- reported (``evaluate``): top-1; top-5 only with more than 5 classes (None otherwise: with 5 classes top-5 is 1.0
  by construction; clip_benchmark's ``len(classes) >= 5`` reports that 1.0); and ``mean_per_class_recall``, computed
  as clip_benchmark does, by scikit-learn's ``balanced_accuracy_score`` of the top-1 predictions: each class's
  recall, averaged over the classes, so a small class weighs as much as a large one.
Ties in the ranking go to the lower class index (a stable sort; ``torch.topk`` leaves them unspecified).

Templates: clip_benchmark's per-dataset sets (``datasets/en_zeroshot_classification_templates.json``), kept in
``data/zeroshot_templates.json``. The dataset is ``EvalConfig.zeroshot_dataset``, else the root folder's name;
a name without a set of its own gets the ImageNet set, clip_benchmark's builder's fallback (``datasets/builder.py``
``default_dataset_for_templates``); ``vtab/`` / ``tfds/`` / ``wds/`` names are looked up without the prefix too,
as there. Which set was used is recorded in ``settings``. Class names: ``classnames.txt`` at the root (one per
line, in the class folders' sorted order: clip_benchmark's names for the named datasets go there), else the
folder names.

The ImageFolder (``read_image_folder``) is torchvision's ``ImageFolder``: a class per first-level folder, sorted,
its images found recursively below it (symlinks followed), kept by torchvision's ``IMG_EXTENSIONS``; other files
are skipped and counted. Deviations: hidden folders and files (leading ``.``) are skipped too (torchvision makes
``.ipynb_checkpoints`` a class and reads macOS ``._*.jpg`` forks); an image whose header PIL cannot read is an
error naming the count and examples unless ``allow_missing``, then left out and counted (torchvision crashes).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from data_schemas import InputFileError

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")  # torchvision's
DATA_FILES = ("data/zeroshot_templates.json",)  # read by this code: in its code version (provenance)
TEMPLATES_FILE = Path(__file__).parent / DATA_FILES[0]
TOP_K = 5
CLASSES_PER_CALL = 64  # classes whose prompts are encoded together: bounds the text features held at once


# ---- the ImageFolder -------------------------------------------------------------------------------------
@dataclass
class ImageFolder:
    files: list[str]
    labels: list[int]
    classes: list[str]
    skipped: list[str] = field(default_factory=list)  # not an image by name, or hidden
    unreadable: list[str] = field(default_factory=list)  # image files PIL cannot open (left out, allowed)


def _readable(path: str) -> bool:
    """Whether PIL identifies the file (its header only: the decoding errors come at encoding, named there)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path):
            return True
    except (OSError, UnidentifiedImageError, Image.DecompressionBombError):
        return False


def _walk(class_dir: Path) -> tuple[list[str], list[str]]:
    """(image files, skipped files) below one class folder, in torchvision's order (directories sorted, then
    their file names)."""
    images, skipped, walked = [], [], []
    for top, dirs, names in os.walk(class_dir, followlinks=True):  # walked in full, then sorted as torchvision
        skipped += [os.path.join(top, d) + os.sep for d in dirs if d.startswith(".")]
        dirs[:] = [d for d in dirs if not d.startswith(".")]  # pruned while walking: sorted() would see it all
        walked.append((top, names))
    for top, names in sorted(walked):
        for n in sorted(names):
            ok = not n.startswith(".") and n.lower().endswith(IMG_EXTENSIONS)
            (images if ok else skipped).append(os.path.join(top, n))
    return images, skipped


def read_image_folder(folder: str | Path, classes: Sequence[str] | None = None, *, open_images: bool = True,
                      allow_unreadable: bool = False, name: str = "zeroshot") -> ImageFolder:
    """One ImageFolder split. ``classes`` (another split's names, e.g. the linear probe's train) fixes the indices:
    a class folder outside it is an error. ``open_images``: check each image's header (off: the listing alone,
    the input check before the model loads); unreadable ones are an error unless ``allow_unreadable``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: image folder not found (expected <folder>/<class>/.../<image>)")
    names = sorted(e.name for e in os.scandir(folder) if e.is_dir() and not e.name.startswith("."))
    if not names:
        raise FileNotFoundError(f"{folder}: no class folders")
    if classes is not None:
        extra = [c for c in names if c not in classes]
        if extra:
            raise InputFileError(f"{folder}: class folder(s) {extra[:5]} not in the train split")
    index = {c: k for k, c in enumerate(classes if classes is not None else names)}
    out = ImageFolder([], [], list(classes if classes is not None else names))
    for c in names:
        images, skipped = _walk(folder / c)
        out.skipped += skipped
        bad = {p for p in images if not _readable(p)} if open_images else set()
        out.unreadable += [p for p in images if p in bad]
        if len(bad) == len(images):
            raise InputFileError(f"{folder / c}: class folder without {'readable ' if bad else ''}images "
                                 f"({', '.join(IMG_EXTENSIONS)}, found recursively)")
        images = [p for p in images if p not in bad]
        out.files += images
        out.labels += [index[c]] * len(images)
    if out.unreadable and not allow_unreadable:
        n = len(out.files) + len(out.unreadable)
        raise InputFileError(f"{name}: {len(out.unreadable)} of {n} image file(s) under {folder} cannot be read "
                             f"(e.g. {out.unreadable[:3]}): replace them, or pass --allow-missing to leave them out "
                             "(counted in settings)")
    return out


def folder_settings(*splits: ImageFolder) -> dict:
    """What the readers left out, for ``settings``."""
    skipped = [p for s in splits for p in s.skipped]
    unreadable = [p for s in splits for p in s.unreadable]
    return {"skipped_files": len(skipped), "skipped_examples": skipped[:5],
            "unreadable_images": len(unreadable), "unreadable_examples": unreadable[:5]}


# ---- templates and class names ---------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _template_data() -> dict:
    return json.loads(TEMPLATES_FILE.read_text())


def template_sets() -> dict[str, list[str]]:
    """clip_benchmark's template set per dataset name."""
    return _template_data()["templates"]


def templates_for(dataset: str) -> tuple[str, list[str], bool]:
    """(the set's name, its templates, whether that is the fallback) for ``dataset``: its own set (``vtab/x``
    also looked up as ``x``), else ImageNet's."""
    sets = template_sets()
    keys = [dataset]
    if dataset.split("/", 1)[0] in ("vtab", "tfds", "wds") and "/" in dataset:
        keys.append(dataset.split("/", 1)[1])
    found = next((k for k in keys if k in sets), None)
    used = found or _template_data()["default"]
    return used, sets[used], found is None


def dataset_name(root: Path, explicit: str | None) -> str:
    """The dataset a run names: ``explicit`` (``EvalConfig.zeroshot_dataset``), else the root folder's name."""
    return (explicit or Path(root).resolve().name).strip().lower()


def class_names(root: Path, classes: list[str]) -> list[str]:
    """``classnames.txt`` (one per line, the folders' sorted order) if present, else the folder names."""
    path = Path(root) / "classnames.txt"
    if not path.exists():
        return list(classes)
    names = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    if len(names) != len(classes):
        raise InputFileError(f"{path}: {len(names)} names for {len(classes)} class folders")
    return names


def check(root: str | Path) -> None:
    """The run's input refusals that need no image opened (``registry``'s check before the model loads)."""
    root = Path(root)
    class_names(root, read_image_folder(root, open_images=False).classes)


# ---- scoring ---------------------------------------------------------------------------------------------
def classifier(enc, names: list[str], templates: list[str]) -> np.ndarray:
    """(dim, classes): each class's prompts' normalised features averaged, renormalised."""
    cols = []
    for i in range(0, len(names), CLASSES_PER_CALL):
        chunk = names[i:i + CLASSES_PER_CALL]
        T = enc.texts([t.format(c=c) for c in chunk for t in templates]).reshape(len(chunk), len(templates), -1)
        w = T.mean(axis=1)
        cols.append(w / np.linalg.norm(w, axis=1, keepdims=True))
    return np.concatenate(cols).T


def metrics(logits: np.ndarray, labels: np.ndarray, n_classes: int) -> dict:
    """top1, top5 (None with 5 classes or fewer: it would be 1.0 by construction), mean_per_class_recall of
    (images, classes) scores."""
    from sklearn.metrics import balanced_accuracy_score

    order = np.argsort(-logits, axis=1, kind="stable")
    pred = order[:, 0]
    top5 = float(np.mean([y in row[:TOP_K] for y, row in zip(labels, order)])) if n_classes > TOP_K else None
    return {"n": int(len(labels)), "correct": int((pred == labels).sum()), "top1": float((pred == labels).mean()),
            "top5": top5, "mean_per_class_recall": float(balanced_accuracy_score(labels, pred))}


def evaluate(enc, root: str | Path, dataset: str | None = None, allow_missing: bool = False) -> dict:
    """``{"subsets": {"zeroshot": {n, correct, top1, top5, mean_per_class_recall, classes, templates}},
    "groups": {top1, top5, mean_per_class_recall}, "settings"}`` for the ImageFolder at ``root``."""
    root = Path(root)
    data = read_image_folder(root, allow_unreadable=allow_missing)
    names = class_names(root, data.classes)
    name = dataset_name(root, dataset)
    used, templates, fallback = templates_for(name)
    W = classifier(enc, names, templates)
    logits = enc.images([(f, None) for f in data.files]) @ W
    r = metrics(logits, np.array(data.labels), len(names)) | {"classes": len(names), "templates": len(templates)}
    settings = {"dataset": name, "dataset_from": "zeroshot_dataset" if dataset else "the root folder's name",
                "templates": used, "n_templates": len(templates),
                "top5": f"reported with more than {TOP_K} classes, else None (trivially 1.0)",
                "class_names": "classnames.txt" if (root / "classnames.txt").exists() else "folder names",
                **folder_settings(data)}
    if fallback:
        settings["templates_note"] = f"no clip_benchmark template set for {name!r}: its default, {used}"
    return {"subsets": {"zeroshot": r}, "groups": {k: r[k] for k in ("top1", "top5", "mean_per_class_recall")},
            "settings": settings}
