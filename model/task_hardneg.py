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
MACCO's terms keep their ``LossWeights``. Gradient accumulation splices the negatives' rows as MACCO's (the step
equals the unaccumulated one, tested). Under DDP the negatives (and their validity) are gathered across ranks
as every contrastive feature is (``losses.ContrastObjective``): each rank computes the global batch's terms and
threshold, so the step equals one process on the global batch (tested). Not supported (refused in one line):
SigLIP towers (CE-CLIP's and NegCLIP's losses are softmax ones)."""
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
        """``MaccoTask.forward`` with the hard negatives; ``micro``: one micro-batch's pass of an accumulated step
        (its rows, the negatives' included, spliced into the cached rows of the whole batch, as
        ``MaccoTask.accumulated_terms``; the threshold advances in the last pass only)."""
        images, texts, text_mask, image_mask = batch["image"], batch["text"], batch["text_mask"], batch["image_mask"]
        enc = self.encode(images, texts, text_mask, image_mask, sizes)
        live = self._neg_rows(batch)
        whole, scale = None, enc.scale
        if micro is None:
            rows = {"i_glob": enc.i_glob, "t_glob": enc.t_glob, "im_glob": enc.im_glob, "tm_glob": enc.tm_glob,
                    **live}
        else:
            rows = micro.splice(self._rows(enc, None, text_mask, image_mask) | live)
            scale = scale if micro.last else scale.detach()
        K = batch["hard_texts"].shape[1]
        out = self._hard_terms(rows, scale, K, advance=micro is None or micro.last)
        if micro is not None:
            out = {k: micro.share(v) for k, v in out.items()}
            whole = {"text": self.masked_samples(rows["text_masked"]),
                     "image": self.masked_samples(rows["image_masked"]), "words": rows["masked_words"].sum()}
        out |= self.reconstruction_terms(enc, images, texts, text_mask, image_mask, stats, whole)
        out["total_loss"] = total_loss(out, self.weights)
        with torch.no_grad():
            out["empty_text_masks"] = (~text_mask.any(dim=1)).sum().float()
            out["empty_image_masks"] = (~image_mask.any(dim=1)).sum().float()
            out["hard_negatives"] = live["valid"].sum().float()  # the (micro-)batch's present negatives
            out["logit_scale"] = enc.scale.detach() / (micro.passes if micro is not None else 1)
        return out

    def _neg_rows(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The negatives' globals [B K, E] (sample-major) and validity [B K]: the rows a pass adds."""
        hard = batch["hard_texts"]
        B, K, L = hard.shape
        return {"neg": self.clip.encode_text(hard.reshape(B * K, L)), "valid": batch["hard_valid"].bool().reshape(-1)}

    @torch.no_grad()
    def batch_rows(self, batch: dict[str, torch.Tensor], sizes: Sequence[int] | None = None
                   ) -> dict[str, torch.Tensor]:
        """``MaccoTask.batch_rows`` and the negatives' rows (the caching pass of an accumulated step)."""
        return super().batch_rows(batch, sizes) | self._neg_rows(batch)

    def _hard_terms(self, rows: dict[str, torch.Tensor], scale: torch.Tensor, K: int,
                    advance: bool) -> dict[str, torch.Tensor]:
        """The contrast with the negatives' columns (NegCLIP: the present ones only), MIR, and CE-CLIP's rank and
        intra-modal terms on the full globals (DDP: gathered, the global batch on every rank, as the contrast)."""
        neg = F.normalize(rows["neg"], dim=-1)
        valid = self.gathered_mask(rows["valid"])
        out = self._contrast(rows["i_glob"], rows["t_glob"], rows.get("im_glob"), rows.get("tm_glob"), scale,
                             self.objective, lambda: neg, valid if self.style == "negclip" else None)
        if self.style != "ce-clip":
            return out
        I, T, N = self.objective.gather(F.normalize(rows["i_glob"], dim=-1), F.normalize(rows["t_glob"], dim=-1),
                                        neg)
        used = self.cmr_threshold.clone()  # the threshold this step's rank loss uses (logged)
        terms, nxt = ce_clip_terms(I, T, N.reshape(-1, K, N.shape[-1]), valid.reshape(-1, K), scale, used, self.ce)
        if advance and self.training and torch.is_grad_enabled():
            self.cmr_threshold.copy_(nxt.to(self.cmr_threshold.dtype))
        out |= {k: terms[k] for k in ("cmr_loss", "imc_loss") if k in terms}
        return out | {f"cmr_threshold_{k}": v for k, v in enumerate(used)}
