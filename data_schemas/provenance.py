"""Where a table's rows came from: the version of the code that wrote them (the manifests' ``code_version``, the
flow's stage keys, the evaluation history's ``code_version`` column)."""
from __future__ import annotations

import hashlib
import importlib
from pathlib import Path


def code_version(*modules: str) -> str:
    """sha256 (12 hex) over the source files of ``modules`` (dotted names) - a stage's code version."""
    h = hashlib.sha256()
    for name in sorted(modules):
        mod = importlib.import_module(name)
        h.update(name.encode())
        h.update(Path(mod.__file__).read_bytes())
    return h.hexdigest()[:12]
