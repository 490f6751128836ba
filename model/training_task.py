"""The contract every training task keeps (``MaccoTask``, ``SceneTask``, ``LMTask``), which the training loop relies
on instead of probing for attributes: one call signature for a step, its host-side preparation, what it masks and
reads, and the logit scale's ceiling. open_clip's ``TrainingTask`` (``open_clip/task/base_task.py``) is the model."""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn


@runtime_checkable
class TrainingTask(Protocol):
    """CLIP (``clip``: the model that is exported) plus training-only parts.

    - ``sizes_for(batch)``: what the step needs to know of the (host) batch before it moves to the device (shapes,
      a vocabulary check), so the step never syncs the device; passed to ``forward`` as ``sizes``.
    - ``forward(batch, stats, sizes)``: the named terms (``*_loss`` unweighted), ``total_loss`` (their weighted sum,
      ``losses.total_loss``) and, with ``stats``, statistics.
    - ``masks_text`` / ``masks_image``: whether it reconstructs masked words / patches (it needs the token masks'
      relation and attribute positions / grounded regions); ``reads_text``: whether it reads the token masks' ids
      (they must be in the model's tokenizer).
    - ``logit_scale_max``: the ceiling the loop clamps the logit scale to after each step.
    """
    clip: nn.Module
    logit_scale_max: float

    @property
    def masks_text(self) -> bool: ...

    @property
    def masks_image(self) -> bool: ...

    @property
    def reads_text(self) -> bool: ...

    def sizes_for(self, batch: dict[str, torch.Tensor]) -> Any: ...

    def forward(self, batch: dict[str, torch.Tensor], stats: bool = True, sizes: Any = None
                ) -> dict[str, torch.Tensor]: ...
