"""Winoground (Thrush et al., CVPR 2022): ``examples.jsonl`` + ``images/<name>.png``; text, image and group
scores with strict comparisons."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def load(root: str | Path) -> list[dict]:
    root = Path(root)
    path = root / "examples.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: file not found")
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        r = json.loads(line)
        for f in ("id", "image_0", "image_1", "caption_0", "caption_1"):
            if f not in r:
                raise ValueError(f"{path}: line {n}: missing field {f!r}")
        out.append(r)
    return out


def evaluate(enc, root: str | Path, examples: list[dict]) -> dict:
    root = Path(root)

    def img(name):
        p = root / "images" / f"{name}.png"
        return p if p.exists() else root / "images" / name

    present = [e for e in examples if img(e["image_0"]).exists() and img(e["image_1"]).exists()]
    keys = [(str(img(e[f"image_{k}"])), None) for e in present for k in (0, 1)]
    I = enc.images(keys).reshape(len(present), 2, -1) if present else np.zeros((0, 2, 1))
    T = enc.texts([e[f"caption_{k}"] for e in present for k in (0, 1)]).reshape(len(present), 2, -1) \
        if present else np.zeros((0, 2, 1))
    text = image = group = 0
    for i in range(len(present)):
        s = I[i] @ T[i].T  # s[k, l] = sim(image k, caption l)
        t_ok = s[0, 0] > s[0, 1] and s[1, 1] > s[1, 0]
        i_ok = s[0, 0] > s[1, 0] and s[1, 1] > s[0, 1]
        text, image, group = text + t_ok, image + i_ok, group + (t_ok and i_ok)
    n = len(present)
    return {"n": n, "missing_images": len(examples) - n, "text": text / n if n else None,
            "image": image / n if n else None, "group": group / n if n else None}
