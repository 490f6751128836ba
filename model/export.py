"""Export the CLIP alone (no predictor or mask-token keys) as an open_clip local directory and as a ``.pt``.

- ``<out>/open_clip_config.json`` + ``<out>/open_clip_model.safetensors``:
  ``open_clip.create_model_and_transforms('local-dir:<out>')`` loads it.
- ``<out>.pt`` next to it, ``{"state_dict": ...}``: ``create_model_and_transforms(<arch>, pretrained=<file>)``.
- ``<out>/<arch>.json`` (an architecture named, not a ``local-dir:`` folder): the architecture's open_clip model
  config, so plain open_clip knows the repo's own architectures (``macco-tiny``, …) by name:
  ``open_clip.add_model_config(<out>)`` (or the file), then ``create_model_and_transforms(<arch>, pretrained=<out>.pt)``
  (README "Loading an export in open_clip"). A SigLIP trunk of the repo (``timm_model_name: macco_siglip_…``) is a
  timm model open_clip cannot build without ``model.siglip.register_tiny_timm()``; its folder loads with ``local-dir:``.
Training checkpoints never go in the export directory (the local-dir loader globs weight files).
Every file gets the mode a plain ``open()`` gives (0o666 less the umask): safetensors writes 0o600, which
colleagues sharing ``artifacts/`` could not load.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from data_schemas.provenance import file_sha256


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")



def export_clip(clip: nn.Module, arch: str, out_dir: str | Path, preprocess_cfg: dict | None = None,
                meta: dict | None = None) -> dict:
    """Write the export; returns {dir, pt, sha256 of the safetensors file, keys}."""
    import open_clip
    from safetensors.torch import save_file

    from data_schemas import apply_umask

    from .factory import register_model_configs

    register_model_configs()
    source = Path(arch.removeprefix("local-dir:")) if arch.startswith("local-dir:") else None
    model_cfg = json.loads((source / "open_clip_config.json").read_text())["model_cfg"] if source else \
        open_clip.get_model_config(arch)
    if model_cfg is None:
        raise ValueError(f"unknown open_clip architecture {arch!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if source is not None:  # a local-dir folder (SigLIP): its tokenizer files go along, not its weights
        import shutil

        for f in sorted(source.iterdir()):
            if f.is_file() and f.name != "open_clip_config.json" and f.suffix not in WEIGHT_SUFFIXES:
                shutil.copyfile(f, out_dir / f.name)
                apply_umask(out_dir / f.name)
    state = {k: v.detach().cpu().contiguous() for k, v in clip.state_dict().items()}
    bad = [k for k in state if "predictor" in k or "mask_token" in k]
    if bad:
        raise ValueError(f"export would contain training-only keys: {bad[:5]}")
    visual = clip.visual
    size = visual.image_size[0] if isinstance(visual.image_size, (tuple, list)) else visual.image_size
    # the model's own preprocessing (SigLIP: mean/std 0.5, squash resize), so a local-dir load of the export
    # preprocesses as the model was trained
    own = getattr(visual, "preprocess_cfg", None) or {}
    own = {k: list(v) if isinstance(v, tuple) else v for k, v in own.items()}
    pp = {"size": size, "mode": "RGB", "mean": list(open_clip.OPENAI_DATASET_MEAN),
          "std": list(open_clip.OPENAI_DATASET_STD), "interpolation": "bicubic", "resize_mode": "shortest",
          **own, **(preprocess_cfg or {})}
    weights = out_dir / "open_clip_model.safetensors"
    _replace_with(weights, lambda tmp: save_file(state, str(tmp)))
    config = out_dir / "open_clip_config.json"
    _replace_with(config, lambda tmp: tmp.write_text(json.dumps(
        {"model_cfg": model_cfg, "preprocess_cfg": pp, "macco": {"arch": arch, **(meta or {})}}, indent=2)))
    if source is None and _plain_name(arch):
        _replace_with(out_dir / f"{arch}.json", lambda tmp: tmp.write_text(json.dumps(model_cfg, indent=2)))
    pt = out_dir.with_suffix(".pt")
    _replace_with(pt, lambda tmp: torch.save({"state_dict": state, "arch": arch}, tmp))
    # sha256: the .pt's, the file a user passes as a checkpoint (and the evaluation history's checkpoint_sha256)
    return {"dir": str(out_dir), "pt": str(pt), "sha256": file_sha256(pt),
            "safetensors_sha256": file_sha256(weights), "keys": len(state)}


def _plain_name(arch: str) -> bool:
    """An architecture name open_clip's registry keys a config file by (its stem): no schema, no path."""
    return bool(arch) and ":" not in arch and "/" not in arch and "\\" not in arch and not arch.startswith(".")


def _replace_with(path: Path, write) -> None:
    from data_schemas import replace_file

    replace_file(path, write)
