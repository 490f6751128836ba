"""Patch geometry of open_clip architectures; the box -> patch mapping itself lives in
``data_schemas.geometry`` (the ``patch_masks`` contract, shared with the training data)."""
from __future__ import annotations

from data_schemas.geometry import (PREPROCESS, Geometry, box_in_crop, box_patches, boxes_patches,  # noqa: F401
                                   eval_crop, eval_patches, random_rectangle)

# the paper's backbones and the repo's tiny ones (model/configs/*.json)
GEOMETRIES = {
    "ViT-B-32": Geometry(224, 32), "ViT-B-16": Geometry(224, 16), "ViT-L-14": Geometry(224, 14),
    "macco-tiny": Geometry(64, 8), "macco-micro": Geometry(32, 8),
}


def geometry_for(model: str) -> Geometry:
    """The patch geometry of an open_clip architecture (read from its config when not listed above)."""
    base = model.removesuffix("-quickgelu").removesuffix("-gelu")
    if base in GEOMETRIES:
        return GEOMETRIES[base]
    import open_clip

    cfg = open_clip.get_model_config(base)
    if cfg is None:
        raise ValueError(f"unknown open_clip architecture {model!r}")
    v = cfg["vision_cfg"]
    size = v["image_size"] if isinstance(v["image_size"], int) else v["image_size"][0]
    return Geometry(size, v["patch_size"])
