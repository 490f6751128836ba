"""MACCO model package: open_clip CLIP + training-only predictors, losses, training, export, benchmarks.

Imports torch/open_clip only; never spacy, prefect or duckdb.
"""
from __future__ import annotations

from pathlib import Path

CONFIG_DIR = Path(__file__).parent / "configs"
TINY_MODELS = tuple(sorted(p.stem for p in CONFIG_DIR.glob("*.json")))
_registered = False


def register_model_configs() -> None:
    """Register the repo's tiny open_clip architectures (``macco-tiny``, ``macco-micro``, ``macco-siglip-tiny``
    with its timm trunk) once."""
    global _registered
    if _registered:
        return
    import open_clip

    from .siglip import register_tiny_timm

    register_tiny_timm()
    open_clip.add_model_config(CONFIG_DIR)
    _registered = True


def create_clip(arch: str, pretrained: str | None = None, **kw):
    """``open_clip.create_model(arch, pretrained=...)``; for a ``local-dir:`` folder, whose loader ignores
    ``pretrained`` (it reads the folder's own weights), the file's weights are loaded afterwards — a fine-tune
    of a SigLIP folder starts from its base's export, not from the folder."""
    import open_clip

    if not arch.startswith("local-dir:"):
        return open_clip.create_model(arch, pretrained=pretrained, **kw)
    model = open_clip.create_model(arch, **kw)
    if pretrained:
        open_clip.load_checkpoint(model, pretrained)
    return model


def resolve_arch(name: str, pretrained: str | None = None) -> str:
    """The open_clip architecture to build for ``name``.

    OpenAI ViT weights were trained with QuickGELU; open_clip >= 2.29 no longer switches it on for a file
    checkpoint, so ``ViT-B-32`` with a weights file resolves to ``ViT-B-32-quickgelu`` (the activation the
    weights expect). Pass ``ViT-B-32-gelu`` explicitly to reproduce the official evaluation scripts' GELU load.
    """
    register_model_configs()
    if name.endswith("-gelu"):
        return name[: -len("-gelu")]
    if name in ("ViT-B-32", "ViT-B-16", "ViT-L-14") and pretrained:
        return name + "-quickgelu"
    return name
