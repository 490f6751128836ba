"""Zero-shot classification on an ImageFolder (class sub-directories; optional ``classnames.txt``) with the
80 OpenAI ImageNet templates and open_clip's classifier builder (the paper's general-capability check)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from data_schemas import InputFileError

EXTS = {".jpg", ".jpeg", ".png", ".bmp", ".webp"}


def evaluate(enc, root: str | Path, templates=None) -> dict:
    from open_clip import build_zero_shot_classifier
    from open_clip.zero_shot_metadata import OPENAI_IMAGENET_TEMPLATES

    root = Path(root)
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    if not classes:
        raise FileNotFoundError(f"{root}: no class directories")
    names = classes
    if (root / "classnames.txt").exists():
        names = [l.strip() for l in (root / "classnames.txt").read_text().splitlines() if l.strip()]
        if len(names) != len(classes):
            raise InputFileError(f"{root / 'classnames.txt'}: {len(names)} names for {len(classes)} class folders")
    files = [(str(p), k) for k, c in enumerate(classes) for p in sorted((root / c).iterdir()) if p.suffix.lower() in EXTS]
    with torch.no_grad():
        clf = build_zero_shot_classifier(enc.model, tokenizer=enc.tokenizer, classnames=names,
                                         templates=templates or OPENAI_IMAGENET_TEMPLATES, num_classes_per_batch=10,
                                         device=enc.device, use_tqdm=False)
    feats = enc.images([(f, None) for f, _ in files])
    logits = feats @ clf.cpu().numpy()
    labels = np.array([k for _, k in files])
    top1 = float((logits.argmax(1) == labels).mean()) if len(files) else None
    k = min(5, len(classes))
    top5 = float(np.mean([labels[i] in np.argsort(-logits[i])[:k] for i in range(len(files))])) if len(files) else None
    return {"n": len(files), "classes": len(classes), "top1": top1, f"top{k}": top5,
            "templates": len(templates or OPENAI_IMAGENET_TEMPLATES)}
