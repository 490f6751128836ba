"""Building open_clip models: the repo's tiny architectures registered once, a CLIP from an architecture name and
weights (``create_clip``), the architecture a weights file needs (``resolve_arch``), and what a run starts from in
one line (``weights_note``). open_clip's own ``factory.py`` is the model for the name."""
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


class _NoRandomInitWarning:
    """A logging filter dropping open_clip's "No pretrained weights loaded ... initialized randomly" while a model
    is built whose weights come from elsewhere (a file loaded next, a checkpoint resumed): it would be false."""

    def filter(self, record) -> bool:
        return "initialized randomly" not in record.getMessage()


def create_clip(arch: str, pretrained: str | None = None, weights_later: bool = False, **kw):
    """``open_clip.create_model(arch, pretrained=...)``; for a ``local-dir:`` folder, whose loader ignores
    ``pretrained`` (it reads the folder's own weights), the file's weights are loaded afterwards — a fine-tune
    of a SigLIP folder starts from its base's export, not from the folder. ``weights_later``: the caller loads
    every weight afterwards (a resumed run, a training checkpoint), so open_clip's random-init warning is not
    shown; the caller says what it loaded (``weights_note``)."""
    import logging

    import open_clip

    quiet, root = _NoRandomInitWarning(), logging.getLogger()  # open_clip warns through the root logger
    if weights_later or (pretrained and arch.startswith("local-dir:")):
        root.addFilter(quiet)
    try:
        if not arch.startswith("local-dir:"):
            return open_clip.create_model(arch, pretrained=pretrained, **kw)
        model = open_clip.create_model(arch, **kw)
        if pretrained:
            open_clip.load_checkpoint(model, pretrained)
        return model
    finally:
        root.removeFilter(quiet)


def weights_note(arch: str, pretrained: str | None, resumed: tuple[int, str] | None = None) -> str:
    """What a run starts from, in one line: a resumed checkpoint, a weights file (with its sha256), a pretrained
    tag, or a random initialisation."""
    if resumed is not None:
        return f"{arch}: resumed from step {resumed[0]} (checkpoint {resumed[1]})"
    if pretrained and Path(pretrained).is_file():
        from data_schemas.provenance import file_sha256

        return f"{arch}: weights from {pretrained} (sha256 {file_sha256(pretrained)[:12]})"
    if pretrained:
        return f"{arch}: open_clip pretrained weights {pretrained!r}"
    return f"{arch}: no pretrained weights, initialised randomly"


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
