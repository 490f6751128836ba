"""Grounding backends behind one factory: ``make_grounder(cfg)`` (the backends import ``base``; nothing here
imports a backend before it is asked for, so the package stays light)."""
from __future__ import annotations

import importlib
import threading

from .base import Grounder, GroundingConfig

# backend name -> (module in this package, class)
BACKENDS = {"annotations": ("annotations", "AnnotationsGrounder"),
            "groundingdino": ("groundingdino", "GroundingDinoGrounder"),
            "hf": ("hf", "HFGroundingDinoGrounder"),
            "official": ("official", None)}  # MACCO's file's phrase boxes (pipeline.stages.ground_stage), not a model
_LOAD_LOCK = threading.Lock()


def backend_module(backend: str) -> str:
    """The dotted module of a backend (its code is part of the ground stage's version)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown grounding backend {backend!r} ({' | '.join(BACKENDS)})")
    return f"{__name__}.{BACKENDS[backend][0]}"


def make_grounder(cfg: GroundingConfig, instances=None) -> Grounder:
    """The configured backend. Model loading is serialised: the flow maps shards over threads, and
    transformers' loader builds the model on the meta device through process-wide state (two threads loading
    at once leave meta tensors behind). ``instances``: the annotations backend's boxes (``InstanceBoxes`` or
    {image_id: rows})."""
    if BACKENDS[cfg.backend][1] is None:
        raise ValueError(f"the {cfg.backend!r} backend reads boxes from a file, it has no model")
    cls = getattr(importlib.import_module(backend_module(cfg.backend)), BACKENDS[cfg.backend][1])
    if cfg.backend == "annotations":
        if instances is None:
            raise ValueError("the annotations backend needs the dataset's instance annotations")
        return cls(instances)
    with _LOAD_LOCK:
        return cls(cfg)
