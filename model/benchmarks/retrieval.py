"""Image-text retrieval (COCO / Flickr30k Karpathy test split): recall@1/5/10, image->text and text->image.

Inputs, as released:
- Karpathy's ``dataset_coco.json`` / ``dataset_flickr30k.json``: ``{"images": [{filename, filepath (COCO only),
  split, sentences: [{raw, ...}]}]}``; the records with ``split == "test"`` (5000 / 1000 images), image at
  ``<root>/<filepath>/<filename>`` (Flickr30k: ``<root>/flickr30k-images/<filename>`` or ``<root>/<filename>``);
- the BLIP/ARO list ``coco_karpathy_test.json`` / ``flickr30k_test.json``: ``[{image, caption: [...]}]``, image at
  ``<root>/<image>`` (what the synthetic world writes for the Order benchmarks).
``root`` is the directory holding one of them (the Karpathy file is preferred) or the annotation file itself.

The rule is clip_benchmark's ``zeroshot_retrieval`` (LAION-AI/CLIP_benchmark,
``clip_benchmark/metrics/zeroshot_retrieval.py``): every caption is a text query whose one positive is its image,
every image a query whose positives are all its captions; scores are cosines of the normalised features
(lines 52-66); a query counts at k when at least one positive is among its top k (``recall_at_k`` > 0, lines
82-83 and 95-116); R@k is the mean over queries. Ties in the ranking go to the earlier gallery item (a stable
sort; ``torch.topk`` leaves them unspecified), so R@1 equals the first-index ``argmax`` rule of ``model/probes``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from data_schemas import InputFileError, load_json

KS = (1, 5, 10)
FILES = {"retrieval-coco": ("dataset_coco.json", "coco_karpathy_test.json"),
         "retrieval-flickr": ("dataset_flickr30k.json", "flickr30k_test.json")}


def _find(root: Path, name: str) -> Path:
    if root.is_file():
        return root
    for f in FILES[name]:
        if (root / f).is_file():
            return root / f
    raise FileNotFoundError(f"{root}: none of {list(FILES[name])} found")


def _captions(path: Path, i: int, caps) -> list[str]:
    if not isinstance(caps, list) or not caps:
        raise InputFileError(f"{path}: record {i}: no captions ({caps!r})")
    for c in caps:
        if not isinstance(c, str) or not c.strip():
            raise InputFileError(f"{path}: record {i}: bad caption {c!r}")
    return caps


def load(root: str | Path, name: str = "retrieval-coco",
         split: str = "test") -> tuple[list[str], list[list[str]], dict]:
    """(image paths, captions per image, settings) of the test split."""
    root = Path(root)
    path = _find(root, name)
    base = path.parent
    data = load_json(path)
    images, captions = [], []
    if isinstance(data, dict):  # Karpathy
        if not isinstance(data.get("images"), list):
            raise InputFileError(f"{path}: a Karpathy file needs an 'images' list")
        splits: dict[str, int] = {}
        for i, rec in enumerate(data["images"]):
            for f in ("filename", "split", "sentences"):
                if f not in rec:
                    raise InputFileError(f"{path}: images[{i}]: missing field {f!r}")
            splits[rec["split"]] = splits.get(rec["split"], 0) + 1
            if rec["split"] != split:
                continue
            sents = rec["sentences"]
            if not isinstance(sents, list) or any(not isinstance(s, dict) or "raw" not in s for s in sents):
                raise InputFileError(f"{path}: images[{i}]: 'sentences' must be a list of {{raw: ...}}")
            captions.append(_captions(path, i, [s["raw"] for s in sents]))
            if rec.get("filepath"):
                img = base / rec["filepath"] / rec["filename"]
            else:
                cands = [base / "flickr30k-images" / rec["filename"], base / rec["filename"]]
                img = next((c for c in cands if c.exists()), cands[0])
            images.append(str(img))
        fmt = f"karpathy (split counts {dict(sorted(splits.items()))})"
    elif isinstance(data, list):  # BLIP / ARO
        for i, rec in enumerate(data):
            if not isinstance(rec, dict) or "image" not in rec or "caption" not in rec:
                raise InputFileError(f"{path}: record {i}: needs 'image' and 'caption'")
            caps = rec["caption"]
            captions.append(_captions(path, i, [caps] if isinstance(caps, str) else caps))
            images.append(str(base / rec["image"]))
        fmt = "blip list (the test split)"
    else:
        raise InputFileError(f"{path}: neither a Karpathy dict nor a list of {{image, caption}} records")
    if not images:
        raise InputFileError(f"{path}: no {split!r} images")
    missing = [p for p in images if not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(f"{path}: {len(missing)} of {len(images)} image(s) missing (retrieval needs the "
                                f"whole gallery), e.g. {missing[:3]}")
    return images, captions, {"annotation": str(path), "format": fmt, "images": len(images),
                              "captions": sum(map(len, captions))}


def hits_at_k(scores: np.ndarray, positives: np.ndarray, ks=KS, chunk: int = 1024) -> dict[int, np.ndarray]:
    """Per query (row of ``scores`` [Q, G]): whether a positive (``positives`` bool [Q, G]) is among its top k."""
    if scores.shape != positives.shape:
        raise ValueError(f"scores {scores.shape} and positives {positives.shape} differ in shape")
    if not positives.any(axis=1).all():
        raise ValueError(f"{int((~positives.any(axis=1)).sum())} query(ies) without a positive")
    kmax = min(max(ks), scores.shape[1])
    out = {k: np.zeros(len(scores), bool) for k in ks}
    for s in range(0, len(scores), chunk):
        top = np.argsort(-scores[s:s + chunk], axis=1, kind="stable")[:, :kmax]
        pos = np.take_along_axis(positives[s:s + chunk], top, axis=1)  # [q, kmax]
        for k in ks:
            out[k][s:s + chunk] = pos[:, :k].any(axis=1)
    return out


def recall(I: np.ndarray, T: np.ndarray, text_image: np.ndarray, ks=KS) -> dict[str, dict]:
    """``{"image_to_text/R@k" | "text_to_image/R@k": {n, correct, accuracy}}`` for image features ``I`` [N, E],
    text features ``T`` [M, E] (both normalised) and each text's image row ``text_image`` [M]."""
    S = T @ I.T  # [M texts, N images]
    pos = np.zeros(S.shape, bool)
    pos[np.arange(len(T)), text_image] = True
    out = {}
    for direction, (sc, p) in {"image_to_text": (S.T, pos.T), "text_to_image": (S, pos)}.items():
        for k, h in hits_at_k(sc, p, ks).items():
            out[f"{direction}/R@{k}"] = {"n": int(len(h)), "correct": int(h.sum()), "accuracy": float(h.mean())}
    return out


def evaluate(enc, root: str | Path, name: str = "retrieval-coco") -> dict:
    images, captions, settings = load(root, name)
    texts = [c for caps in captions for c in caps]
    text_image = np.array([i for i, caps in enumerate(captions) for _ in caps])
    subsets = recall(enc.images([(p, None) for p in images]), enc.texts(texts), text_image)
    groups = {k.replace("image_to_text/", "i2t_").replace("text_to_image/", "t2i_"): v["accuracy"]
              for k, v in subsets.items()}
    groups["rsum"] = float(sum(groups.values()))
    return {"subsets": subsets, "groups": groups, "settings": settings | {"ks": list(KS), "ties": "earlier item"}}
