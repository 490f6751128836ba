"""What every GPU-run section shares: the result-file writer (``Emit``), device sync, memory release, peak RSS."""
from __future__ import annotations

import gc
import json
from pathlib import Path


class Emit:
    """Appends one JSON object per line to the section's result file (flushed at once)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __call__(self, kind: str, **data) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"kind": kind, **data}, default=str) + "\n")

    def row(self, **data) -> None:
        self("row", **data)

    def skip(self, what: str, reason: str) -> None:
        self("skip", what=what, reason=reason)


def _sync(device: str):
    import torch

    return torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)


def _free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def _rss_gib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
