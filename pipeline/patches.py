"""Patch geometry of open_clip architectures; the box -> patch mapping itself lives in
``data_schemas.geometry`` (the ``patch_masks`` contract, shared with the training data)."""
from __future__ import annotations

from pathlib import Path

from data_schemas.geometry import (PREPROCESS, Geometry, box_in_crop, box_patches, boxes_patches,  # noqa: F401
                                   eval_crop, eval_patches, random_rectangle)

# the paper's backbones and the repo's tiny ones (model/configs/*.json)
GEOMETRIES = {
    "ViT-B-32": Geometry(224, 32), "ViT-B-16": Geometry(224, 16), "ViT-L-14": Geometry(224, 14),
    "macco-tiny": Geometry(64, 8), "macco-micro": Geometry(32, 8),
    "macco-siglip-tiny": Geometry(32, 8), "macco_siglip_vit_tiny": Geometry(32, 8),  # (and the timm trunks)
    "macco-siglip-demo": Geometry(64, 8), "macco_siglip_vit_demo": Geometry(64, 8),
}


def geometry_for(model: str) -> Geometry:
    """The patch geometry of an open_clip architecture or a ``local-dir:`` folder (read from its config when not
    listed above; a timm trunk's patch size from its name, e.g. ``vit_base_patch16_siglip_224``)."""
    import json
    import re

    base = model.removesuffix("-quickgelu").removesuffix("-gelu")
    if base in GEOMETRIES:
        return GEOMETRIES[base]
    if base.startswith("local-dir:"):
        path = Path(base.removeprefix("local-dir:")) / "open_clip_config.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no open_clip_config.json in the local-dir folder")
        cfg = json.loads(path.read_text()).get("model_cfg")
    else:
        import open_clip

        cfg = open_clip.get_model_config(base)
    if cfg is None:
        raise ValueError(f"unknown open_clip architecture {model!r}")
    v = cfg["vision_cfg"]
    size = v["image_size"] if isinstance(v["image_size"], int) else v["image_size"][0]
    patch = v.get("patch_size")
    trunk = v.get("timm_model_name")
    if patch is None and trunk:
        m = re.search(r"patch(\d+)", trunk)
        patch = int(m.group(1)) if m else (GEOMETRIES[trunk].patch_size if trunk in GEOMETRIES else None)
    if patch is None:
        raise ValueError(f"{model!r}: its vision config names no patch size")
    return Geometry(size, patch)
