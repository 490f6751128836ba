"""``MaccoTask``: an unmodified open_clip CLIP plus the training-only parts (mask tokens, predictors, losses).

One forward pass encodes full and masked copies together (2B texts, 2B images) through the towers' own layers
and returns the named loss terms, their weighted ``total_loss`` and a few statistics. The stop-gradient map is
the reference's (docs/official-implementation.md §2): the text predictor attends to *detached* full-image features; the
image predictor's own masked-image query is detached but its text condition is not.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Sequence, get_args

import torch
import torch.nn.functional as F
from torch import nn

from data_schemas.config import check_choices

from .losses import (ContrastObjective, LossWeights, SigmoidContrastObjective, image_reconstruction_loss,
                     intra_modal_contrast_loss, text_reconstruction_loss, total_loss)
from .masked import (encode_image_pair, encode_image_tokens, encode_text_pair, encode_text_tokens,
                     supports_trimmed_text, tower_shapes)
from .predictors import ImagePredictor, TextPredictor
from .siglip import is_siglip
from .train_config import Mode, TrainConfig
from .train_state import MicroBatch

MODES = get_args(Mode)


@dataclass
class MaccoConfig:
    """The task's settings; every default is ``TrainConfig``'s (one source; ``from_train`` builds it from a run's)."""
    mode: Mode = TrainConfig.mode
    hardneg: bool = TrainConfig.hardneg  # NegCLIP-style hard-negative captions as extra image->text columns
    text_cross_layers: int | None = TrainConfig.text_cross_layers  # None: 2 for B/32 and tiny models, 4 for B/16, L/14
    image_cross_layers: int | None = TrainConfig.image_cross_layers  # None: 3 for B/32 and tiny, 6 for B/16, L/14
    text_self_layers: int = 0
    image_self_layers: int = 0
    predictor_heads: int | None = TrainConfig.predictor_heads  # None: 8 as the reference (width >= 256), 1 per 32 ch.
    loss_weights: LossWeights = field(default_factory=LossWeights)
    mca: bool = TrainConfig.mca  # masked samples as extra contrastive negatives (off: the contrast sees full pairs)
    mir: bool = TrainConfig.mir  # the intra-modal masked-vs-full contrast (off: no MIR term)
    withhold_image: bool = TrainConfig.withhold_image  # the text predictor reads a zero image (the image-free control)

    @classmethod
    def from_train(cls, cfg: TrainConfig) -> "MaccoConfig":
        return cls(mode=cfg.mode, hardneg=cfg.hardneg, text_cross_layers=cfg.text_cross_layers,
                   image_cross_layers=cfg.image_cross_layers, predictor_heads=cfg.predictor_heads,
                   loss_weights=LossWeights(**cfg.loss_weights), mca=cfg.mca, mir=cfg.mir,
                   withhold_image=cfg.withhold_image)

    def __post_init__(self):
        check_choices(self, "macco config")
        if isinstance(self.loss_weights, dict):
            self.loss_weights = LossWeights(**self.loss_weights)

    @property
    def masks_text(self) -> bool:
        return self.mode.split("+")[0] in ("macco", "text-only")  # macco+negclip, macco+ce-clip: MACCO's masks

    @property
    def masks_image(self) -> bool:
        return self.mode.split("+")[0] in ("macco", "image-only")


@dataclass
class Encoded:
    """One step's features: the full and masked copies' tokens and globals (None where a mode does not mask),
    the logit scale, and the step's shapes (``MaccoTask.step_sizes``) and predictor query slots."""
    scale: torch.Tensor
    text_len: int
    text_count: int
    image_count: int
    text_slots: tuple | None
    image_slots: tuple | None
    t_tok: torch.Tensor
    t_glob: torch.Tensor
    tm_tok: torch.Tensor | None
    tm_glob: torch.Tensor | None
    i_glob: torch.Tensor
    i_tok: torch.Tensor
    im_glob: torch.Tensor | None
    im_tok: torch.Tensor | None


def predictor_heads(width: int) -> int:
    """The reference's 8 heads for the paper backbones (joint width 512 or 768: heads of 64 or 96 channels);
    narrower (tiny) models keep heads of 32 channels, as their towers do, instead of splitting into 8 heads of
    4-8 channels."""
    return 8 if width >= 256 else max(1, width // 32)


class MaccoTask(nn.Module):
    """MACCO (and CLIP-FT and the ablations): CLIP + mask tokens + the text and image predictors; a
    ``model.training_task.TrainingTask``."""
    reads_text = True

    def __init__(self, clip: nn.Module, cfg: MaccoConfig, large_backbone: bool = False):
        super().__init__()
        self.clip = clip
        self.cfg = cfg
        shapes = tower_shapes(clip)
        self.patch_size, self.grid = shapes["patch"], shapes["grid"]
        self.sigmoid = is_siglip(clip)  # SigLIP: the sigmoid form of MCA and MIR, with the model's logit bias
        # the training step clamps the logit scale at CLIP's ln 100; a pretrained SigLIP may sit above it (its
        # bias is tuned to that temperature): never below the value it starts from
        self.logit_scale_max = max(math.log(100), float(clip.logit_scale)) if self.sigmoid else math.log(100)
        width = shapes["embed"]
        heads = cfg.predictor_heads or predictor_heads(width)
        if width % heads:
            raise ValueError(f"predictor heads {heads} do not divide the embedding width {width}")
        self.text_mask_token = nn.Parameter(torch.randn(shapes["text_width"]) * 0.02)
        self.img_mask_token = nn.Parameter(torch.randn(shapes["image_width"]) * 0.02)
        t_layers = cfg.text_cross_layers or (4 if large_backbone else 2)
        i_layers = cfg.image_cross_layers or (6 if large_backbone else 3)
        self.text_predictor = TextPredictor(width, heads, t_layers, cfg.text_self_layers, shapes["vocab"])
        self.image_predictor = ImagePredictor(width, heads, self.grid, self.patch_size, i_layers, cfg.image_self_layers)
        # the contrastive terms' form, chosen once: SigLIP's sigmoid (with the model's logit bias) or CLIP's softmax
        self.objective = SigmoidContrastObjective(clip) if self.sigmoid else ContrastObjective()
        self.rank = 0

    # ---- DDP: every term's value and gradient are those of one process on the global batch -----------------
    # The contrastive terms see every rank's features gathered with gradient (``losses.ContrastObjective``). The
    # reconstruction terms are means over the samples that have a mask: each rank divides its sum by the global
    # number of such samples per rank (``samples_per_rank``), so the average over ranks is the global mean (not
    # the mean of the ranks' means, which weighs a rank with few masked samples up).
    @property
    def world_size(self) -> int:
        return self.objective.world_size

    @world_size.setter
    def world_size(self, n: int) -> None:
        self.objective.world_size = n

    def samples_per_rank(self, mask: torch.Tensor) -> torch.Tensor | None:
        """The global number of samples with any masked position over the number of ranks (None: one process,
        the term is the plain local mean)."""
        if self.world_size == 1:
            return None
        n = mask.any(dim=1).sum().to(torch.float32)
        torch.distributed.all_reduce(n)
        return n / self.world_size

    @staticmethod
    def step_sizes(texts: torch.Tensor, text_mask: torch.Tensor, image_mask: torch.Tensor) -> list[int]:
        """The shapes a step needs as host integers: the masked text copy's length (the batch's last EOT or
        masked position, + 1) and the largest masked-token and masked-patch counts of a sample (the predictors'
        query counts). The training loop computes them from the batch while it is still on the CPU and passes
        them as ``sizes``, so a CUDA step has no device sync; without them ``forward`` reads them in one sync
        before any work is queued."""
        L = texts.shape[1]
        if not texts.shape[0]:
            return [L, 0, 0]
        last_masked = torch.where(text_mask, torch.arange(L, device=texts.device), 0).amax(dim=1)
        text_len = torch.maximum(texts.argmax(dim=-1), last_masked).amax() + 1
        sizes = torch.stack([text_len, text_mask.sum(dim=1).amax(), image_mask.sum(dim=1).amax()])
        return sizes.tolist()

    def forward(self, batch: dict[str, torch.Tensor], stats: bool = True,
                sizes: Sequence[int] | None = None, micro: MicroBatch | None = None) -> dict[str, torch.Tensor]:
        """Every training task's signature (``SceneTask``, ``LMTask`` too): a batch as the dataset collates it
        (``image``, ``text``, ``text_mask``, ``image_mask``, optionally ``hard_text``) -> the named terms.
        ``micro``: the batch is one micro-batch of an accumulated step (``terms``)."""
        return self.terms(batch["image"], batch["text"], batch["text_mask"], batch["image_mask"],
                          batch.get("hard_text"), stats=stats, sizes=sizes, micro=micro)

    @torch.no_grad()
    def batch_rows(self, batch: dict[str, torch.Tensor], sizes: Sequence[int] | None = None
                   ) -> dict[str, torch.Tensor]:
        """The caching pass of an accumulated step (``model.train_state.MicroBatch``): per sample of this
        micro-batch, what the batch-level terms read (the full and masked globals, the hard negatives') and what
        the per-sample means divide by (whether it has a masked word / patch, its number of masked words)."""
        image_mask = batch["image_mask"]
        enc = self.encode(batch["image"], batch["text"], batch["text_mask"], image_mask, sizes)
        return self._rows(enc, batch.get("hard_text"), batch["text_mask"], image_mask)

    @property
    def masks_text(self) -> bool:
        return self.cfg.masks_text

    @property
    def masks_image(self) -> bool:
        return self.cfg.masks_image

    def sizes_for(self, batch: dict[str, torch.Tensor]) -> list[int]:
        """``step_sizes`` of a (host) batch: what the loop passes to ``forward`` as ``sizes``."""
        return self.step_sizes(batch["text"], batch["text_mask"], batch["image_mask"])

    def terms(self, images: torch.Tensor, texts: torch.Tensor, text_mask: torch.Tensor,
              image_mask: torch.Tensor, hard_texts: torch.Tensor | None = None,
              stats: bool = True, sizes: Sequence[int] | None = None,
              micro: MicroBatch | None = None) -> dict[str, torch.Tensor]:
        """images [B,3,H,W], texts [B,L] ids, text_mask [B,L] bool, image_mask [B,N] bool (True = masked):
        ``encode`` -> ``contrastive_terms`` -> ``reconstruction_terms`` -> the weighted total. ``stats=False``
        skips the masked-word accuracy (an argmax over the vocabulary; the loop asks for it only on the steps it
        logs). ``micro``: these rows are one micro-batch of an accumulated step (``accumulated_terms``)."""
        if micro is not None:
            return self.accumulated_terms(images, texts, text_mask, image_mask, hard_texts, stats, sizes, micro)
        enc = self.encode(images, texts, text_mask, image_mask, sizes)
        out = self.contrastive_terms(enc, hard_texts)
        out |= self.reconstruction_terms(enc, images, texts, text_mask, image_mask, stats)
        out["total_loss"] = total_loss(out, self.cfg.loss_weights)
        with torch.no_grad():
            out["empty_text_masks"] = (~text_mask.any(dim=1)).sum().float()
            out["empty_image_masks"] = (~image_mask.any(dim=1)).sum().float()
            out["logit_scale"] = enc.scale.detach()
        return out

    def accumulated_terms(self, images: torch.Tensor, texts: torch.Tensor, text_mask: torch.Tensor,
                          image_mask: torch.Tensor, hard_texts: torch.Tensor | None, stats: bool,
                          sizes: Sequence[int] | None, micro: MicroBatch) -> dict[str, torch.Tensor]:
        """One micro-batch's gradient pass (open_clip's ``accum_freq``): its rows encoded with gradient and
        spliced into the cached rows of the whole batch, so MCA and MIR contrast the whole batch (every negative of
        the unaccumulated step); the per-sample means divide by the whole batch's counts. Each term is this pass's
        share (``MicroBatch``); the logit scale and bias take their gradient in the last pass only."""
        enc = self.encode(images, texts, text_mask, image_mask, sizes)
        rows = micro.splice(self._rows(enc, hard_texts, text_mask, image_mask))
        scale, obj = enc.scale, self.objective
        if not micro.last:
            scale = scale.detach()
            if self.sigmoid:  # the objective reads the bias from its model: a detached one for this pass
                obj = SigmoidContrastObjective(SimpleNamespace(logit_bias=self.clip.logit_bias.detach()))
                obj.world_size = self.world_size
        hard = (lambda: rows["hard"]) if "hard" in rows else None
        out = self._contrast(rows["i_glob"], rows["t_glob"], rows.get("im_glob"), rows.get("tm_glob"), scale, obj,
                             hard)
        out = {k: micro.share(v) for k, v in out.items()}
        whole = {"text": self.masked_samples(rows["text_masked"]), "image": self.masked_samples(rows["image_masked"]),
                 "words": rows["masked_words"].sum()}
        out |= self.reconstruction_terms(enc, images, texts, text_mask, image_mask, stats, whole)
        out["total_loss"] = total_loss(out, self.cfg.loss_weights)
        with torch.no_grad():
            out["empty_text_masks"] = (~text_mask.any(dim=1)).sum().float()
            out["empty_image_masks"] = (~image_mask.any(dim=1)).sum().float()
            out["logit_scale"] = enc.scale.detach() / micro.passes
        return out

    def _rows(self, enc: Encoded, hard_texts: torch.Tensor | None, text_mask: torch.Tensor,
              image_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """``batch_rows`` of an encoded micro-batch (the live rows of a gradient pass)."""
        rows = {"i_glob": enc.i_glob, "t_glob": enc.t_glob, "text_masked": text_mask.any(dim=1),
                "image_masked": image_mask.any(dim=1), "masked_words": text_mask.sum(dim=1)}
        if enc.im_glob is not None:
            rows["im_glob"] = enc.im_glob
        if enc.tm_glob is not None:
            rows["tm_glob"] = enc.tm_glob
        if self.cfg.hardneg and hard_texts is not None:
            rows["hard"] = self.clip.encode_text(hard_texts)
        return rows

    def masked_samples(self, has: torch.Tensor) -> torch.Tensor:
        """The number of the step's samples with a masked position (``has`` [B] bool: the whole batch), under
        DDP the global number over the ranks (``samples_per_rank``): what an accumulated pass divides by."""
        n = has.sum().to(torch.float32)
        if self.world_size > 1:
            torch.distributed.all_reduce(n)
            n = n / self.world_size
        return n

    def encode(self, images: torch.Tensor, texts: torch.Tensor, text_mask: torch.Tensor,
               image_mask: torch.Tensor | None, sizes: Sequence[int] | None = None) -> Encoded:
        """The full and masked copies through the towers' own layers. Cross-attention-only predictors read the
        masked copies at their masked positions only (query slots): the copies' last blocks run only there;
        self-attention predictor layers read every position (no slots). ``image_mask`` None: no masked image
        copy (the full views and the masked text only)."""
        cfg, clip = self.cfg, self.clip
        scale = clip.logit_scale.exp()
        masks_image = cfg.masks_image and image_mask is not None
        if sizes is None:
            sizes = self.step_sizes(texts, text_mask, image_mask if masks_image else text_mask[:, :0])
        text_len, text_count, image_count = sizes
        if self.sigmoid:  # a bidirectional text tower: every position of the masked copy depends on every other
            text_len = texts.shape[1]
        tp, ip = self.text_predictor, self.image_predictor
        text_slots = image_slots = None
        if cfg.masks_text:
            text_slots = tp.slots(text_mask[:, :text_len], text_count)
            if text_slots is None:
                text_len = texts.shape[1]
        if masks_image:
            image_slots = ip.slots(image_mask, image_count)
        tm_tok = tm_glob = im_glob = im_tok = None
        if cfg.masks_text:
            (t_tok, t_glob), (tm_tok, tm_glob) = encode_text_pair(clip, texts, text_mask, self.text_mask_token,
                                                                  text_len, text_slots and text_slots[0])
        else:
            # without an image predictor (which attends to every position, padding included, as the
            # reference) only the EOT is read: under the causal mask the positions after the batch's last EOT
            # change nothing, so the text runs trimmed to them (the same features)
            trim = not masks_image and supports_trimmed_text(clip)
            t_tok, t_glob = encode_text_tokens(clip, texts[:, :text_len] if trim else texts)
        if masks_image:
            (i_glob, i_tok), (im_glob, im_tok) = encode_image_pair(clip.visual, images, image_mask,
                                                                   self.img_mask_token, image_slots and image_slots[0])
        else:
            i_glob, i_tok = encode_image_tokens(clip.visual, images)
        return Encoded(scale, text_len, text_count, image_count, text_slots, image_slots, t_tok, t_glob, tm_tok,
                       tm_glob, i_glob, i_tok, im_glob, im_tok)

    def contrastive_terms(self, enc: Encoded, hard_texts: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """MCA (the full pairs, with MCA the masked globals as extra negatives, with hardneg the swapped
        captions) and MIR (masked vs full per masked modality), in the task's contrastive form."""
        hard = (lambda: self.clip.encode_text(hard_texts)) if self.cfg.hardneg and hard_texts is not None else None
        return self._contrast(enc.i_glob, enc.t_glob, enc.im_glob, enc.tm_glob, enc.scale, self.objective, hard)

    def _contrast(self, i_glob: torch.Tensor, t_glob: torch.Tensor, im_glob: torch.Tensor | None,
                  tm_glob: torch.Tensor | None, scale: torch.Tensor, obj: ContrastObjective,
                  hard_glob: Callable[[], torch.Tensor] | None,
                  hard_keep: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """``contrastive_terms`` on given globals (``hard_glob``: the hard negatives' globals, made where the
        unaccumulated step has always made them, after MIR: the order autograd sums the text tower's gradients;
        ``hard_keep``: which of the gathered ones are columns, ``model.task_hardneg``)."""
        cfg = self.cfg
        I, T = obj.gather(F.normalize(i_glob, dim=-1), F.normalize(t_glob, dim=-1))
        imgs, txts = [I], [T]
        intra = []  # MIR per masked modality, each computed where its masked globals are made
        if cfg.masks_text or cfg.masks_image:
            I_m = F.normalize(im_glob, dim=-1) if cfg.masks_image else None
            T_m = F.normalize(tm_glob, dim=-1) if cfg.masks_text else None
            if I_m is not None:
                I_m, = obj.gather(I_m)
            if T_m is not None:
                T_m, = obj.gather(T_m)
            if T_m is not None:
                if cfg.mca:
                    txts.append(T_m)
                if cfg.mir:
                    intra.append(obj.intra(T, T_m, scale))
            if I_m is not None:
                if cfg.mca:
                    imgs.append(I_m)
                if cfg.mir:
                    intra.append(obj.intra(I, I_m, scale))
        hard = None
        if hard_glob is not None:
            hard, = obj.gather(F.normalize(hard_glob(), dim=-1))
            hard = hard if hard_keep is None else hard[hard_keep]
        out = {"contrast_loss": obj.contrast(imgs, txts, scale, hard)}
        if intra:
            out["intra_modal_contrast_loss"] = intra_modal_contrast_loss(intra)
        return out

    def masked_word_features(self, enc: Encoded, text_mask: torch.Tensor) -> torch.Tensor:
        """What the vocabulary head reads at the masked words [n_masked, E] (in the order of
        ``texts[text_mask]``): the text predictor on the masked text copy and the detached full image (zeros with
        ``withhold_image``: the image-free control)."""
        i_tok, i_glob = enc.i_tok.detach(), enc.i_glob.detach()
        if self.cfg.withhold_image:
            i_tok, i_glob = torch.zeros_like(i_tok), torch.zeros_like(i_glob)
        return self.text_predictor.predict(enc.tm_tok, enc.tm_glob, i_tok, i_glob, text_mask[:, :enc.text_len],
                                           enc.text_count, enc.text_slots)

    @torch.no_grad()
    def predicted_words(self, images: torch.Tensor, texts: torch.Tensor, text_mask: torch.Tensor) -> torch.Tensor:
        """The text predictor's word ids at the masked positions [n_masked] (the order of ``texts[text_mask]``),
        each caption against its full image, through the training step's own path (``encode`` without the masked
        image copy, ``masked_word_features``): what the reconstruction probe scores."""
        enc = self.encode(images, texts, text_mask, None)
        return self.text_predictor.head(self.masked_word_features(enc, text_mask)).argmax(-1)

    def reconstruction_terms(self, enc: Encoded, images: torch.Tensor, texts: torch.Tensor,
                             text_mask: torch.Tensor, image_mask: torch.Tensor, stats: bool = True,
                             whole: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """The masked words from the masked text copy and the *detached* full image; the masked patches' pixels
        from the *detached* masked image copy and the full text (the reference's stop-gradient map). ``whole``:
        these rows are a micro-batch of a larger step, whose numbers of samples with a masked word (``text``) or
        patch (``image``) and of masked words (``words``) the means divide by (each term its share)."""
        cfg, tp, ip, out = self.cfg, self.text_predictor, self.image_predictor, {}
        if cfg.masks_text:
            h = self.masked_word_features(enc, text_mask)
            targets = texts[text_mask]
            out["text_reconstruction_loss"] = text_reconstruction_loss(h, tp.head, targets, text_mask.nonzero()[:, 0],
                                                                       texts.shape[0],
                                                                       self.samples_per_rank(text_mask)
                                                                       if whole is None else whole["text"])
            if stats:
                with torch.no_grad():
                    if not len(targets):
                        out["masked_word_acc"] = h.new_zeros(())
                    else:
                        right = (tp.head(h).argmax(-1) == targets).float()
                        out["masked_word_acc"] = right.mean() if whole is None else right.sum() / whole["words"]
        if cfg.masks_image:
            rows = ip.predict(enc.im_tok.detach(), enc.im_glob.detach(), enc.t_tok, enc.t_glob, image_mask,
                              enc.image_count, enc.image_slots)
            out["image_reconstruction_loss"] = image_reconstruction_loss(rows, images, image_mask, self.patch_size,
                                                                         self.samples_per_rank(image_mask)
                                                                         if whole is None else whole["image"])
        return out
