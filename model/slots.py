"""Query slots: a step's masked positions packed left per sample, shared by the masked encoders
(``masked.encode_text_pair`` / ``encode_image_pair`` with ``queries``) and the predictors (``predict`` with
``slots``), so a masked copy's last block and the cross-attention-only predictors run at those positions only."""
from __future__ import annotations

import torch

Slots = tuple[torch.Tensor, torch.Tensor]  # (idx [B, M], valid [B, M]), as query_slots returns


def query_slots(positions: torch.Tensor, count: int | None = None) -> Slots:
    """The positions [B, L] (bool) packed left per sample: (idx [B, M] into L, valid [B, M]) with M the largest
    count (``count``, when the caller has it on the host: no device sync here); the valid slots list the
    positions in order, so ``x.gather(1, idx)[valid]`` is ``x[positions]``."""
    counts = positions.sum(dim=1)
    m = count if count is not None else (int(counts.max()) if positions.numel() else 0)
    idx = torch.argsort((~positions).to(torch.int8), dim=1, stable=True)[:, :m]  # masked first, in order
    return idx, torch.arange(m, device=positions.device) < counts.unsqueeze(1)


def take(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x [B, L, D] at the positions idx [B, M] -> [B, M, D]."""
    return x.gather(1, idx.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
