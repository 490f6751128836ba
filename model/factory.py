"""Building open_clip models: the repo's tiny architectures registered once, a CLIP from an architecture name and
weights (``create_clip``), the architecture a weights file needs (``resolve_arch``), and what a run starts from in
one line (``weights_note``). open_clip's own ``factory.py`` is the model for the name."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from safetensors import SafetensorError

from data_schemas import InputFileError

DATA_FILES = ("configs/*.json",)  # the files this code reads: part of its code version (data_schemas.provenance)
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
            with weights_file(pretrained, arch):
                return open_clip.create_model(arch, pretrained=pretrained, **kw)
        with weights_file(folder_weights(arch), arch):
            model = open_clip.create_model(arch, **kw)
        if pretrained:
            with weights_file(pretrained, arch):
                open_clip.load_checkpoint(model, pretrained)
        return model
    finally:
        root.removeFilter(quiet)


# what torch and safetensors raise for a file that is not a readable weights file (empty, truncated, text, pickled);
# safetensors' own error (a garbage .safetensors: "header too large") derives from Exception alone
_LOAD_ERRORS = (RuntimeError, EOFError, KeyError, ValueError, OSError, UnicodeDecodeError, SafetensorError)


def folder_weights(model: str) -> str | None:
    """The weights file a ``local-dir:`` folder's loader reads (its first ``*.safetensors``), if any."""
    return next((str(p) for p in sorted(Path(model.removeprefix("local-dir:")).glob("*.safetensors"))), None)


@contextmanager
def weights_file(path: str | None, arch: str | None = None):
    """Loading weights from ``path`` (into ``arch``): a file that is not a readable weights file (empty, truncated,
    text, a pickle of Python objects) is one ``InputFileError`` naming the file and what is wrong with it; readable
    weights that do not fit ``arch`` (open_clip's size mismatch or assertion) one naming both. The file is judged by
    loading it alone (``torch.load(weights_only=True)`` / safetensors); otherwise the original error stands."""
    import pickle

    try:
        yield
    except (*_LOAD_ERRORS, pickle.UnpicklingError, AssertionError) as exc:
        if not path or not Path(path).is_file():
            raise
        problem = weights_problem(path)
        if problem is None and arch is not None and isinstance(exc, (AssertionError, RuntimeError)):
            problem = (f"these weights do not fit architecture {arch!r}{_exported_from(path)} "
                       f"({type(exc).__name__}: {' '.join(str(exc).split())[:120]})")
        if problem is None:
            raise
        raise InputFileError(f"{path}: {problem}") from exc


def _exported_from(path) -> str:
    """``; they are <arch>'s`` when the file records the architecture it was exported from (``model.export``)."""
    import torch

    try:
        arch = torch.load(path, map_location="cpu", weights_only=True).get("arch")
    except (*_LOAD_ERRORS, AttributeError):
        return ""
    return f"; the file was exported from {arch!r} (pass --model {arch})" if isinstance(arch, str) else ""


def weights_problem(path: str | Path) -> str | None:
    """What is wrong with a weights file (None: it loads as weights)."""
    import pickle

    import torch

    path = Path(path)
    if path.stat().st_size == 0:
        return "an empty file, not weights"
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            load_file(str(path))
        else:
            torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        import re

        what = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
        holds = f" (it holds a {what.group(1)})" if what else ""
        return (f"not plain weights{holds}: a checkpoint holding Python objects is refused (torch.load "
                "weights_only); load it where you trust it and save its state_dict")
    except (*_LOAD_ERRORS, pickle.PickleError) as exc:
        return (f"not a readable weights file ({type(exc).__name__}: {' '.join(str(exc).split())[:120] or 'no data'}; "
                "a torch checkpoint or a .safetensors file expected)")
    return None


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
