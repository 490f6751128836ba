"""The plain reference computations of the MACCO terms: the oracle the training step (``MaccoTask.forward``, the
functions of ``model/losses.py``, the predictors' ``predict``) is compared with in tests/unit/test_task.py,
test_losses.py and test_predictors.py.

Everything the reference code's way, with none of the step's shortcuts: full and masked copies as one 2B pass
at all 77 text positions, the predictors' decoders run at every query position (not through
``predict`` and its packing), vocabulary log-probabilities everywhere, the masks applied afterwards.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from model.losses import LossWeights, contrast_loss, intra_modal_loss, norm_pix, patchify, total_loss
from model.masked import encode_image_tokens, encode_text_tokens
from model.predictors import ImagePredictor, TextPredictor, inject_global


def text_hidden(tp: TextPredictor, x: torch.Tensor, x_global: torch.Tensor, y: torch.Tensor,
                y_global: torch.Tensor) -> torch.Tensor:
    """What the vocabulary head reads at every position [B, L, E]: x masked text tokens [B, L, E], y full image
    patches [B, N, E]."""
    return tp._decode(inject_global(x, x_global), inject_global(y, y_global))


def text_log_probs(tp: TextPredictor, x: torch.Tensor, x_global: torch.Tensor, y: torch.Tensor,
                   y_global: torch.Tensor) -> torch.Tensor:
    """Vocabulary log-probabilities at every position [B, L, V]."""
    return torch.log_softmax(tp.head(text_hidden(tp, x, x_global, y, y_global)).float(), dim=-1)


def image_predictions(ip: ImagePredictor, x: torch.Tensor, x_global: torch.Tensor, y: torch.Tensor,
                      y_global: torch.Tensor) -> torch.Tensor:
    """Pixel predictions at every patch [B, N, P*P*3]: x masked image patches [B, N, E], y full text tokens."""
    x = ip.decoder_embed(inject_global(x, x_global)) + ip.pos_embed.to(x.dtype)
    return ip._decode(x, inject_global(y, y_global))


def masked_text_nll(log_probs: torch.Tensor, texts: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log_probs [B, L, V], the original ids texts [B, L], mask [B, L] bool: the NLL at the masked positions,
    per sample first, then over the samples with any (0 when none has)."""
    nll = -log_probs.gather(2, texts.unsqueeze(-1)).squeeze(-1)
    m = mask.float()
    per = (nll * m).sum(1) / m.sum(1).clamp(min=1)
    has = m.sum(1) > 0
    return per[has].mean() if has.any() else (nll * m).sum()


def masked_image_mse(pred: torch.Tensor, images: torch.Tensor, mask: torch.Tensor, patch_size: int) -> torch.Tensor:
    """The reference's norm-pix MSE: pred [B, N, p*p*3] at every patch; images [B, 3, H, W]; mask [B, N] bool
    (True = masked); per sample over its masked patches, then over the samples with any (count + 1e-8)."""
    target = norm_pix(patchify(images.float(), patch_size))
    err = ((pred.float() - target) ** 2).mean(dim=-1)  # [B, N]
    m = mask.float()
    n = m.sum(dim=1)
    per_sample = (err * m).sum(dim=1) / n.clamp(min=1)
    has = (n > 0).float()
    return (per_sample * has).sum() / (has.sum() + 1e-8)


def reference_terms(task, img: torch.Tensor, t: torch.Tensor, tm: torch.Tensor, im: torch.Tensor
                    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The four MACCO terms of ``task`` (mode macco, one process) on the batch, and their weighted total, with
    the reference's stop-gradients (the predictors read detached full-view features)."""
    clip, B = task.clip, t.shape[0]
    s = clip.logit_scale.exp()
    tok, glob = encode_text_tokens(clip, torch.cat([t, t]), torch.cat([torch.zeros_like(tm), tm]),
                                   task.text_mask_token)
    cls, pat = encode_image_tokens(clip.visual, torch.cat([img, img]), torch.cat([torch.zeros_like(im), im]),
                                   task.img_mask_token)
    I, I_m, T, T_m = (F.normalize(x, dim=-1) for x in (cls[:B], cls[B:], glob[:B], glob[B:]))
    logp = text_log_probs(task.text_predictor, tok[B:], glob[B:], pat[:B].detach(), cls[:B].detach())
    pred = image_predictions(task.image_predictor, pat[B:].detach(), cls[B:].detach(), tok[:B], glob[:B])
    terms = {"contrast_loss": contrast_loss([I, I_m], [T, T_m], s),
             "intra_modal_contrast_loss": (intra_modal_loss(T, T_m, s) + intra_modal_loss(I, I_m, s)) / 2,
             "text_reconstruction_loss": masked_text_nll(logp, t, tm),
             "image_reconstruction_loss": masked_image_mse(pred, img, im, task.patch_size)}
    return terms, total_loss(terms, LossWeights())


def sigmoid_pairs_reference(rows: list[torch.Tensor], cols: list[torch.Tensor], positive, scale: float,
                            bias: float, n: int) -> torch.Tensor:
    """The sigmoid (SigLIP) terms pair by pair: -sum log sigmoid(z (s x.y + b)) / n over every row x and column
    y, z = +1 where ``positive(i, j)`` (flat indices), else -1."""
    total = torch.zeros(())
    for i, x in enumerate(rows):
        for j, y in enumerate(cols):
            z = 1.0 if positive(i, j) else -1.0
            total = total - F.logsigmoid(torch.as_tensor(z) * (scale * torch.dot(x, y) + bias))
    return total / n
