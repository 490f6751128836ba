"""``HardNegativeTask``: the training modes with hard-negative captions (``train_config.HARDNEG_STYLES``) through
``MaccoTask``'s own step: NegCLIP (``negclip``), CE-CLIP (``ce-clip``) and MACCO stacked on each (``macco+negclip``,
``macco+ce-clip``: MACCO's masked copies and terms and the hard negatives in one step).

The batch carries each sample's hard-negative slots (``model.data.MaccoDataset``: ``hard_texts`` [B, K, L] token
ids, ``hard_valid`` [B, K]); the negatives are encoded by the text tower with gradient, L2-normalised, and:
- **NegCLIP**: the present negatives (K = 1 drawn per sample and step, as NegCLIP's loader) are extra image->text
  columns of the contrast (``contrast_loss``); a sample without one adds no column. Plain ``negclip``: the contrast
  is ``model.hardneg.negclip_loss`` (tested); stacked, it is MACCO's MCA with those columns (the masked images
  meet them too), weight 1 (NegCLIP's single loss).
- **CE-CLIP**: every slot (K = 4 typed slots, ``CE_CLIP_SLOTS``) is an extra image->text column, a missing one as the
  placeholder caption, as their code; ``cmr_loss`` and ``imc_loss`` are ``model.hardneg.ce_clip_terms``' on the
  full globals, weights 0.2 and 0.2 (their code), the rank loss masked by ``hard_valid``. The CMR threshold is the
  task's buffer ``cmr_threshold`` (one per slot type): updated once per training step, saved with the task in
  every checkpoint, so a resume continues it. Plain ``ce-clip``: ``contrast_loss`` is their ``contrast_loss``.
MACCO's terms keep their ``LossWeights``. Under DDP the negatives (and their validity) are gathered across ranks
as every contrastive feature is (``losses.ContrastObjective``): each rank computes the global batch's terms and
threshold, so the step equals one process on the global batch (tested). Not supported (refused in one line):
gradient accumulation (``train_config``), SigLIP towers (CE-CLIP's and NegCLIP's losses are softmax ones)."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from data_schemas.config import ConfigError

from .hardneg import CE_CLIP_SLOTS, CeClipConfig, ce_clip_terms, initial_threshold
from .losses import term_weights, total_loss
from .task import MaccoConfig, MaccoTask
from .train_config import HARDNEG_STYLES
from .train_state import MicroBatch


class HardNegativeTask(MaccoTask):
    """``MaccoTask`` with the hard-negative terms of its mode's style."""

    def __init__(self, clip: nn.Module, cfg: MaccoConfig, large_backbone: bool = False,
                 ce: CeClipConfig = CeClipConfig()):
        super().__init__(clip, cfg, large_backbone)
        if cfg.mode not in HARDNEG_STYLES:
            raise ValueError(f"mode {cfg.mode!r} has no hard negatives (choose {', '.join(HARDNEG_STYLES)})")
        if self.sigmoid:
            raise ConfigError(f"train mode {cfg.mode}: a SigLIP model; NegCLIP's and CE-CLIP's losses are softmax "
                              "(CLIP) losses: train a CLIP architecture")
        self.style, self.ce = HARDNEG_STYLES[cfg.mode], ce
        self.weights = term_weights(cfg.loss_weights)
        if self.style == "ce-clip":
            self.weights |= {"cmr_loss": ce.cmr_weight, "imc_loss": ce.imc_weight}
            self.register_buffer("cmr_threshold", initial_threshold(ce, CE_CLIP_SLOTS))

    def gathered_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """Every rank's ``mask`` (no gradient), concatenated in rank order as ``ContrastObjective.gather``."""
        if self.world_size == 1:
            return mask
        flat = mask.to(torch.uint8).contiguous()  # gloo gathers no bool tensors
        parts = [torch.empty_like(flat) for _ in range(self.world_size)]
        torch.distributed.all_gather(parts, flat)
        return torch.cat(parts).bool()

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """A task of another mode (``init_task``: a MACCO or CLIP-FT checkpoint) has no threshold: the start value;
        a CE-CLIP task's threshold is not NegCLIP's."""
        if self.style == "ce-clip" and "cmr_threshold" not in state_dict:
            state_dict = {**state_dict, "cmr_threshold": self.cmr_threshold}
        elif self.style != "ce-clip" and "cmr_threshold" in state_dict:
            state_dict = {k: v for k, v in state_dict.items() if k != "cmr_threshold"}
        return super().load_state_dict(state_dict, strict, assign)

    def forward(self, batch: dict[str, torch.Tensor], stats: bool = True,
                sizes: Sequence[int] | None = None, micro: MicroBatch | None = None) -> dict[str, torch.Tensor]:
        if micro is not None:
            raise ConfigError(f"train mode {self.cfg.mode}: gradient accumulation is not supported")
        images, texts, text_mask, image_mask = batch["image"], batch["text"], batch["text_mask"], batch["image_mask"]
        hard, valid = batch["hard_texts"], batch["hard_valid"].bool()
        B, K, L = hard.shape
        enc = self.encode(images, texts, text_mask, image_mask, sizes)
        neg = F.normalize(self.clip.encode_text(hard.reshape(B * K, L)), dim=-1)
        keep = self.gathered_mask(valid.reshape(-1)) if self.style == "negclip" else None  # NegCLIP: present only
        out = self._contrast(enc.i_glob, enc.t_glob, enc.im_glob, enc.tm_glob, enc.scale, self.objective,
                             lambda: neg, keep)
        if self.style == "ce-clip":
            out |= self._ce_terms(enc, neg.reshape(B, K, -1), valid)
        out |= self.reconstruction_terms(enc, images, texts, text_mask, image_mask, stats)
        out["total_loss"] = total_loss(out, self.weights)
        with torch.no_grad():
            out["empty_text_masks"] = (~text_mask.any(dim=1)).sum().float()
            out["empty_image_masks"] = (~image_mask.any(dim=1)).sum().float()
            out["hard_negatives"] = valid.sum().float()  # the batch's present negatives
            out["logit_scale"] = enc.scale.detach()
        return out

    def _ce_terms(self, enc, neg: torch.Tensor, valid: torch.Tensor) -> dict[str, torch.Tensor]:
        """CE-CLIP's rank and intra-modal terms on the full globals; the threshold advances on a training step."""
        I, T = F.normalize(enc.i_glob, dim=-1), F.normalize(enc.t_glob, dim=-1)
        I, T, neg = self.objective.gather(I, T, neg)  # DDP: the global batch on every rank, as the contrast
        terms, nxt = ce_clip_terms(I, T, neg, self.gathered_mask(valid), enc.scale, self.cmr_threshold, self.ce)
        if self.training and torch.is_grad_enabled():
            self.cmr_threshold.copy_(nxt.to(self.cmr_threshold.dtype))
        out = {k: terms[k] for k in ("cmr_loss", "imc_loss") if k in terms}
        with torch.no_grad():
            for k, v in enumerate(self.cmr_threshold):
                out[f"cmr_threshold_{k}"] = v.clone()
        return out
