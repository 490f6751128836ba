"""Hard-negative losses on features: NegCLIP's and CE-CLIP's (pure torch functions; the training modes negclip,
ce-clip and MACCO on each call them through ``model.task_hardneg.HardNegativeTask``).

Notation: I, T the batch's image and caption globals [B, E], N its hard-negative caption globals [B, K, E]
(caption i's k-th negative at N[i, k]), all L2-normalised; ``mask`` [B, K] says which negatives exist;
s = exp(logit_scale), the scale the model returns (open_clip's ``logit_scale.exp()``).

**NegCLIP** (Yuksekgonul et al., ICLR 2023), ``negclip_loss``: CLIP's symmetric contrastive loss in which each image
is also scored against every hard-negative caption of the batch: image->text rows over the columns [T; N valid]
(no column is any image's positive), text->image unchanged. A negative whose ``mask`` is false is no column at
all (it contributes nothing); with no mask every negative is a column.

**CE-CLIP** (Zhang et al., CVPR 2024), ``ce_clip_terms``: the terms of ``Clip_DALoss`` in their code
(lezhang7/Enhance-FineGrained, ``src/open_clip/loss.py``), its single-process branch (``world_size == 1``), whose
text features are [T; N flattened] (caption i's negatives at rows B + iK ... B + iK + K - 1):
- ``contrast_loss``: (CE(s I [T; N]^T, arange B) + CE(s T I^T, arange B)) / 2 with ``hardnegative``; without it
  the image side sees T only;
- ``imc_loss`` (intra-modal contrast, weight 0.2): CE(s T N^T, 0): every caption's row over all B K negatives of
  the batch, with column 0 as the target of every row, as their code computes it;
- ``cmr_loss`` (cross-modal rank, weight 0.2): mean over all B K slots of relu(th_k + d_ik - g_i) * mask_ik, with
  g_i = s I_i.T_i and d_ik = s I_i.N_ik * mask_ik (so in logit units, and the mean's denominator counts the
  missing slots too);
- the threshold th (one per negative type k, the state the caller carries from step to step and can save):
  ``mean``: th_k = mean_i g_i - mean of d_ik over the i with d_ik != 0; ``max``: th_k = max_i (g_i mask_ik - d_ik)
  / 5; ``fixed``: th stays the given value. The new value is detached, and (``mean``, ``max``) clamped to
  [0, ``upper_bound``] as their training loop does after the loss (``src/training/train.py``, upper bound 10); the
  first step's threshold is 0 (``fixed``: 2), their loop's start value.
- ``total_loss`` = contrast + 0.2 cmr + 0.2 imc (each of the two only when enabled).

Where their code does what a reader of the paper's description would not expect, we follow their code (the parity
tests hold us to it). (The paper's full text could not be read when this was written; the comparison rests on its
stated design: an intra-modal contrast between a caption and its hard negatives, and type-specific adaptive
thresholds.) The IMC target is column 0 for every row (the first negative of the first caption), not each
caption's own pairing, its denominator spans every caption's negatives, and the ground-truth logits it is handed
are unused. A missing negative (their '###' placeholder caption: the caller passes some embedding in its slot)
still enters the image->text contrast and the IMC as a column: their mask acts on the rank loss only, whose mean
still divides by the missing slots. The ``mean`` threshold finds the present negatives by d != 0, not by the
mask; the ``max`` threshold divides by a constant 5 and counts a missing slot as 0; the threshold is in logit
units (times s). Their multi-process branch computes the same terms on the gathered global batch but hard-codes
K = 4 in its caption layout; we follow the single-process branch, for any K. Two deviations, where their code
gives no usable value: their ``.squeeze()`` breaks on B = 1 or K = 1 (we keep [B, K]); and a ``mean`` threshold
for a type with no present negative in the batch is 0 / 0 = NaN there, which makes every later loss NaN: we keep
that type's previous threshold instead (tested against theirs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

CE_CLIP_SLOTS = 4  # CE-CLIP's typed negatives per caption: len(model.negatives.CE_CLIP_KINDS) (tested)


def _check_shapes(images: torch.Tensor, texts: torch.Tensor, negatives: torch.Tensor,
                  mask: torch.Tensor | None) -> None:
    if images.ndim != 2 or texts.shape != images.shape:
        raise ValueError(f"images {tuple(images.shape)} and texts {tuple(texts.shape)} must both be [B, E]")
    if negatives.ndim != 3 or negatives.shape[0] != images.shape[0] or negatives.shape[2] != images.shape[1]:
        raise ValueError(f"negatives {tuple(negatives.shape)} must be [B, K, E] with B, E of images "
                         f"{tuple(images.shape)}")
    if mask is not None and tuple(mask.shape) != tuple(negatives.shape[:2]):
        raise ValueError(f"mask {tuple(mask.shape)} must be [B, K] = {tuple(negatives.shape[:2])}")


def negclip_loss(images: torch.Tensor, texts: torch.Tensor, negatives: torch.Tensor, scale: torch.Tensor,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
    """NegCLIP's loss: the CLIP loss with the batch's (present) hard-negative captions as extra image->text columns."""
    _check_shapes(images, texts, negatives, mask)
    flat = negatives.reshape(-1, negatives.shape[-1])
    if mask is not None:
        flat = flat[mask.reshape(-1).bool()]
    labels = torch.arange(images.shape[0], device=images.device)
    i2t = F.cross_entropy(scale * images @ torch.cat([texts, flat]).t(), labels)
    t2i = F.cross_entropy(scale * texts @ images.t(), labels)
    return (i2t + t2i) / 2


@dataclass(frozen=True)
class CeClipConfig:
    """CE-CLIP's options, named and defaulted as their ``Clip_DALoss`` / training flags (the paper's weights)."""
    hardnegative: bool = True
    imc: bool = True
    cmr: bool = True
    imc_weight: float = 0.2
    cmr_weight: float = 0.2
    threshold_type: Literal["mean", "max", "fixed"] = "mean"
    fixed_threshold: float = 2.0
    upper_bound: float | None = 10.0

    def __post_init__(self):
        if self.threshold_type not in ("mean", "max", "fixed"):
            raise ValueError(f"threshold_type {self.threshold_type!r}: choose 'mean', 'max' or 'fixed'")


def initial_threshold(config: CeClipConfig, n_types: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """The rank loss's threshold before the first step, one per negative type: 0, or the fixed value."""
    start = config.fixed_threshold if config.threshold_type == "fixed" else 0.0
    return torch.full((n_types,), float(start), device=device, dtype=dtype)


def _next_threshold(config: CeClipConfig, gt: torch.Tensor, da: torch.Tensor, mask: torch.Tensor,
                    threshold: torch.Tensor) -> torch.Tensor:
    """The threshold for the next step ([K], detached) from this step's g [B, 1] and masked d [B, K]."""
    if config.threshold_type == "fixed":
        return threshold.detach()
    if config.threshold_type == "mean":
        present = da != 0
        count = present.sum(0)
        mean_da = (da * present).sum(0) / count.clamp_min(1)
        new = gt.mean() - mean_da
        new = torch.where(count > 0, new, threshold.to(new.dtype).expand_as(new))
    else:
        new = (gt * mask - da).max(0).values / 5
    new = new.detach()
    if config.upper_bound is not None:
        new = torch.clamp(new, 0, config.upper_bound)
    return new


def ce_clip_terms(images: torch.Tensor, texts: torch.Tensor, negatives: torch.Tensor, mask: torch.Tensor,
                  scale: torch.Tensor, threshold: torch.Tensor, config: CeClipConfig = CeClipConfig()
                  ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """CE-CLIP's terms (``contrast_loss``, ``imc_loss``, ``cmr_loss``, ``total_loss``) and the next threshold.

    ``threshold`` is the state from the previous step ([K], or ``initial_threshold`` at the first step); the caller
    keeps the returned one for the next step (and in its checkpoint). Terms that are off are absent from the dict."""
    _check_shapes(images, texts, negatives, mask)
    B, K, E = negatives.shape
    flat = negatives.reshape(B * K, E)
    maskf = mask.to(images.dtype)
    labels = torch.arange(B, device=images.device)
    gt_cols = scale * images @ texts.t()
    i2t = torch.cat([gt_cols, scale * images @ flat.t()], 1) if config.hardnegative else gt_cols
    contrast = (F.cross_entropy(i2t, labels) + F.cross_entropy(scale * texts @ images.t(), labels)) / 2
    terms = {"contrast_loss": contrast}
    total = contrast
    new_threshold = threshold.detach()
    if config.cmr:
        gt = gt_cols.diagonal().reshape(B, 1)
        da = scale * (negatives @ images.unsqueeze(-1)).squeeze(-1) * maskf
        terms["cmr_loss"] = (F.relu(threshold + da - gt) * maskf).mean()
        total = total + config.cmr_weight * terms["cmr_loss"]
        new_threshold = _next_threshold(config, gt.expand(B, K), da, maskf, threshold)
    if config.imc:
        imc_logits = scale * texts @ flat.t()
        terms["imc_loss"] = F.cross_entropy(imc_logits, torch.zeros(B, dtype=torch.long, device=images.device))
        total = total + config.imc_weight * terms["imc_loss"]
    terms["total_loss"] = total
    return terms, new_threshold
