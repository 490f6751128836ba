"""MACCO losses: the functions the training step (``MaccoTask.forward``) calls, one per named term (every key
ends in ``_loss``), and the weighted total (``term_weights``: the one map term -> weight; ``total_loss``: the
weighted sum of the ``*_loss`` keys). The plain reference computations the tests compare these with (dense
log-probabilities, every patch predicted) are in ``tests/reference_losses.py``.

Notation: I, T full image/text globals and I_m, T_m masked ones, all L2-normalised [B, E]; s = exp(logit_scale).
- ``contrast_loss`` with MCA: rows [I; I_m] against columns [T; T_m] (and back), labels arange(B) repeated, so
  masked samples are extra negatives for full anchors and must find their *full* partner as anchors.
  Hard-negative captions (NegCLIP) are extra image->text columns with no positive.
- ``intra_modal_contrast_loss`` (MIR, ``intra_modal_loss`` per modality): masked vs full within each modality,
  both directions, same s; the mean over the masked modalities.
- ``text_reconstruction_loss``: NLL of the original token at masked positions, averaged per sample first, then
  over samples with >= 1 masked token (0 if none).
- ``image_reconstruction_loss``: MAE norm-pix MSE at masked patches, per sample first, then over samples with
  >= 1 masked patch (the reference divides by count + 1e-8; the value is the same up to that 1e-8).
Sigmoid form (SigLIP models; b = the model's logit bias): ``sigmoid_contrast_loss`` and
``sigmoid_intra_modal_loss`` — one binary term log sigmoid(z (s x.y + b)) per pair, z = +1 for the full matched
pairs only, summed over B.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


def _term(weight: float, label: str):
    """A term's one declared entry: its weight (the field's default), its name (the field's: the term's key and its
    ``loss_weights`` key in a run's config) and its label in the report's rows (``TERM_LABELS``)."""
    return field(default=weight, metadata={"label": label})


@dataclass
class LossWeights:
    """The weight of each loss term, named as the term (``loss_weights`` in a run's config: one name from the YAML
    to the term; the paper's values), with its label in the report."""
    contrast_loss: float = _term(1.0, "contrast")
    intra_modal_contrast_loss: float = _term(0.1, "MIR")
    text_reconstruction_loss: float = _term(20.0, "masked text")
    image_reconstruction_loss: float = _term(250.0, "masked image")


# (term, label) of every term in LossWeights' order: the report's gradient rows (handed to pipeline.report)
TERM_LABELS: tuple[tuple[str, str], ...] = tuple((f.name, f.metadata["label"]) for f in dataclasses.fields(LossWeights))
# CE-CLIP's terms (``model.hardneg.ce_clip_terms``, weighted by its ``CeClipConfig``, not ``loss_weights`` keys): the
# modes ce-clip and macco+ce-clip add them
CE_CLIP_TERM_LABELS: tuple[tuple[str, str], ...] = (("imc_loss", "IMC"), ("cmr_loss", "CMR"))
# the report's gradient rows: every term some mode weights (a row only where a run has the term)
REPORT_TERMS: tuple[tuple[str, str], ...] = TERM_LABELS + CE_CLIP_TERM_LABELS


def contrast_loss(images: list[torch.Tensor], texts: list[torch.Tensor], scale: torch.Tensor,
                  hard_texts: torch.Tensor | None = None) -> torch.Tensor:
    """MCA over stacks of image and text globals (each [B, E], normalised); plain CLIP loss for one of each."""
    B = images[0].shape[0]
    I = torch.cat(images)  # [kB, E]
    T = torch.cat(texts)  # [mB, E]
    cols = torch.cat([T, hard_texts]) if hard_texts is not None else T
    logits_i2t = scale * I @ cols.t()
    logits_t2i = scale * T @ I.t()
    labels = torch.arange(B, device=I.device)
    l_i2t = F.cross_entropy(logits_i2t, labels.repeat(len(images)))
    l_t2i = F.cross_entropy(logits_t2i, labels.repeat(len(texts)))
    return (l_i2t + l_t2i) / 2


def intra_modal_loss(full: torch.Tensor, masked: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """MIR for one modality: masked [B, E] against full [B, E] globals (normalised) and back."""
    labels = torch.arange(full.shape[0], device=full.device)
    return (F.cross_entropy(scale * masked @ full.t(), labels) + F.cross_entropy(scale * full @ masked.t(), labels)) / 2


def intra_modal_contrast_loss(per_modality: list[torch.Tensor]) -> torch.Tensor:
    """The MIR term: the mean of the masked modalities' ``intra_modal_loss`` values (the caller computes each
    where its masked globals are made: the order autograd sums a feature's gradients in follows that order)."""
    return sum(per_modality) / len(per_modality)


# ---- the sigmoid (SigLIP) form of the contrastive terms (MaccoTask uses them on SigLIP towers) ------------
def sigmoid_pairs_loss(x: torch.Tensor, y: torch.Tensor, labels: torch.Tensor, scale: torch.Tensor,
                       bias: torch.Tensor, n: int) -> torch.Tensor:
    """-sum over every pair (i, j) of log sigmoid(labels_ij * (s * x_i . y_j + b)), over ``n`` (SigLIP: the
    number of images; one term per pair, no direction)."""
    return -F.logsigmoid(labels * (scale * x @ y.t() + bias)).sum() / n


def sigmoid_contrast_loss(images: list[torch.Tensor], texts: list[torch.Tensor], scale: torch.Tensor,
                          bias: torch.Tensor, hard_texts: torch.Tensor | None = None) -> torch.Tensor:
    """MCA in sigmoid form over stacks of image and text globals (each [B, E], normalised; the first of each
    stack the full ones): every pair of the rows [I; I_m] with the columns [T; T_m] (and the hard-negative
    captions) is one binary term; the full matched pairs (I_i, T_i) are the only positives, every other pair —
    a masked sample with its own full partner included — is an extra negative. Over B, as SigLIP: with one
    image and one text stack this is open_clip's ``SigLipLoss`` (tested). Unlike the softmax form, where
    (I_m_i, T_i) is a positive for the masked image as anchor and a negative for the text as anchor, a pair has
    one label here, so the masked samples are negatives only."""
    B = images[0].shape[0]
    rows = torch.cat(images)
    cols = torch.cat([*texts, hard_texts]) if hard_texts is not None else torch.cat(texts)
    labels = -torch.ones(rows.shape[0], cols.shape[0], device=rows.device, dtype=rows.dtype)
    labels[:B, :B] += 2 * torch.eye(B, device=rows.device, dtype=rows.dtype)
    return sigmoid_pairs_loss(rows, cols, labels, scale, bias, B)


def sigmoid_intra_modal_loss(full: torch.Tensor, masked: torch.Tensor, scale: torch.Tensor,
                             bias: torch.Tensor) -> torch.Tensor:
    """MIR in sigmoid form for one modality: each masked global [B, E] against each full one, positive with its
    own, negative with the others, with the model's scale and bias; over B."""
    B = full.shape[0]
    labels = 2 * torch.eye(B, device=full.device, dtype=full.dtype) - 1
    return sigmoid_pairs_loss(masked, full, labels, scale, bias, B)


# ---- the contrastive objective, chosen once per task (as open_clip's ClipLoss / SigLipLoss) ---------------
class ContrastObjective:
    """The contrastive terms' form and the feature gather across ranks, chosen once for a task: the softmax form
    (CLIP) or the sigmoid one (SigLIP, with the model's logit bias). Under DDP the features of every rank are
    gathered *with* gradient (open_clip's gather_with_grad, without local_loss): each rank computes the global
    loss, the gather's backward sums the ranks' gradients into each rank's own features, and DDP's average over
    ranks gives the global gradient (without gradient through the gather only the local features get one and the
    average shrinks the contrastive terms by 1 / world_size against the reconstruction terms)."""

    sigmoid = False

    def __init__(self):
        self.world_size = 1

    def gather(self, *feats: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.world_size == 1:
            return feats
        import torch.distributed.nn

        return tuple(torch.cat(torch.distributed.nn.all_gather(f), dim=0) for f in feats)

    def contrast(self, images: list[torch.Tensor], texts: list[torch.Tensor], scale: torch.Tensor,
                 hard_texts: torch.Tensor | None = None) -> torch.Tensor:
        """MCA (``contrast_loss``)."""
        return contrast_loss(images, texts, scale, hard_texts)

    def intra(self, full: torch.Tensor, masked: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """MIR of one modality (``intra_modal_loss``)."""
        return intra_modal_loss(full, masked, scale)


class SigmoidContrastObjective(ContrastObjective):
    """The sigmoid form (``sigmoid_contrast_loss``, ``sigmoid_intra_modal_loss``) with the model's logit bias."""

    sigmoid = True

    def __init__(self, clip: nn.Module):
        super().__init__()
        self.clip = clip  # its logit_bias, read at each call (it trains)

    def contrast(self, images, texts, scale, hard_texts=None):
        return sigmoid_contrast_loss(images, texts, scale, self.clip.logit_bias, hard_texts)

    def intra(self, full, masked, scale):
        return sigmoid_intra_modal_loss(full, masked, scale, self.clip.logit_bias)


def per_sample_mean(values: torch.Tensor, sample: torch.Tensor, batch: int,
                    count: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of ``values`` [N] within each sample (``sample`` [N] its index), then over the samples that have any
    (0 when none has). ``count``: divide the per-sample sum by it instead of by the local number of samples that
    have any (under DDP, the global number per rank: see ``MaccoTask.samples_per_rank``)."""
    if values.shape[0] == 0:
        return values.sum() * 0.0
    per_sample = torch.zeros(batch, device=values.device, dtype=values.dtype).index_add_(0, sample, values)
    counts = torch.zeros(batch, device=values.device, dtype=values.dtype).index_add_(0, sample,
                                                                                     torch.ones_like(values))
    has = counts > 0
    if count is None:
        return (per_sample[has] / counts[has]).mean()
    return (per_sample[has] / counts[has]).sum() / count.to(values.dtype)


class _VocabNLL(torch.autograd.Function):
    """Per-row NLL of ``targets`` under softmax(hidden @ weight.T + bias), with one vocabulary-sized buffer.

    The logits are kept transposed, [V, N] = weight @ hidden.T: every product then reads or writes its large
    operand in its natural layout (the weight gradient comes out contiguous). Forward: logits -> column max m ->
    exp(logits - m) in place -> column sums s;
    NLL = m + log s - target logit. It keeps the unnormalised exp (softmax = exp / s) and s. Backward folds
    1/s, the one-hot target and the incoming per-row gradient into the matrix products, so the buffer is passed
    over twice forward and read by the products backward; ``log_softmax`` + ``gather`` pass over it about twice
    as often and zero-fill an [N, V] gradient for the gather.
    Same values and gradients. Under CUDA autocast the products run in the autocast dtype and the statistics in
    fp32.
    """

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, hidden, weight, bias, targets):
        logits = weight @ hidden.t()  # [V, N]; then the bias in place (addmm's bias pre-fill costs more on CPU)
        if bias is not None:
            logits.add_(bias.to(logits.dtype).unsqueeze(1))
        acc = torch.promote_types(logits.dtype, torch.float32)
        lf = logits.to(acc)  # the same buffer when it is fp32
        target_logit = lf[targets, torch.arange(lf.shape[1], device=lf.device)]
        m = lf.amax(dim=0, keepdim=True)  # [1, N]
        e = lf.sub_(m).exp_()
        s = e.sum(dim=0)
        ctx.save_for_backward(hidden, weight, e.to(logits.dtype), s, targets)
        ctx.has_bias = bias is not None
        return m.squeeze(0) + s.log() - target_logit

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        # d nll_n / d logits_n = e_n / s_n - one_hot(target_n), times the incoming grad_n; e is [V, N]
        hidden, weight, e, s, targets = ctx.saved_tensors
        acc = s.dtype
        g = grad.to(acc).unsqueeze(1)  # [N, 1]
        gs = g / s.unsqueeze(1)
        d_hidden = (e.t() @ weight.to(e.dtype)).to(acc).mul_(gs).sub_(weight[targets].to(acc) * g).to(hidden.dtype)
        h = hidden.to(acc)
        d_weight = (e @ (h * gs).to(e.dtype)).to(acc).index_add_(0, targets, h * g, alpha=-1).to(weight.dtype)
        d_bias = None
        if ctx.has_bias:
            d_bias = (e @ gs.squeeze(1).to(e.dtype)).to(acc).index_add_(0, targets, g.squeeze(1), alpha=-1)
            d_bias = d_bias.to(weight.dtype)
        return d_hidden, d_weight, d_bias, None


def vocab_nll(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
              targets: torch.Tensor) -> torch.Tensor:
    """-log softmax(hidden @ weight.T + bias)[target] per row of ``hidden`` [N, E] (``targets`` [N] token ids):
    the vocabulary head and its NLL fused, for the masked-text loss."""
    return _VocabNLL.apply(hidden, weight, bias, targets)


def text_reconstruction_loss(hidden: torch.Tensor, head: nn.Linear, targets: torch.Tensor, sample: torch.Tensor,
                             batch: int, count: torch.Tensor | None = None) -> torch.Tensor:
    """The masked-text term: NLL of the original tokens ``targets`` [N] under ``head`` (the vocabulary head) at
    the N masked positions, ``hidden`` [N, E] (``TextPredictor.predict``); ``sample`` [N] each one's sample index
    in the batch of ``batch``. The head and its NLL fused (``vocab_nll``: one vocabulary-sized buffer, the values
    of log_softmax + gather), then ``per_sample_mean`` (``count`` as there)."""
    return per_sample_mean(vocab_nll(hidden, head.weight, head.bias, targets), sample, batch, count)


def _patch_grid(images: torch.Tensor, p: int) -> torch.Tensor:
    """[B, 3, H, W] -> a [B, h, w, p, p, 3] view: patch (i, j) with (p, q, c) order inside (MAE ``nchpwq -> nhwpqc``)."""
    B, C, H, W = images.shape
    return images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1)


def patchify(images: torch.Tensor, p: int) -> torch.Tensor:
    """[B, 3, H, W] -> [B, N, p*p*3] with (p, q, c) order inside a patch (MAE ``nchpwq -> nhwpqc``)."""
    grid = _patch_grid(images, p)
    return grid.reshape(grid.shape[0], -1, p * p * grid.shape[-1])


def norm_pix(patches: torch.Tensor) -> torch.Tensor:
    """MAE's norm-pix target: each patch [..., p*p*3] minus its mean, over sqrt(unbiased var + 1e-6), as the
    reference (torch's default unbiased variance)."""
    mean = patches.mean(dim=-1, keepdim=True)
    var = patches.var(dim=-1, keepdim=True)
    return (patches - mean) / (var + 1e-6) ** 0.5


def image_reconstruction_loss(rows: torch.Tensor, images: torch.Tensor, mask: torch.Tensor, patch_size: int,
                              count: torch.Tensor | None = None) -> torch.Tensor:
    """The masked-image term from the predictions at the masked patches only: ``rows`` [n, p*p*3] in the order of
    ``mask.nonzero()`` (``ImagePredictor.predict``); ``images`` the training tensors [B, 3, H, W]; ``mask`` [B, N]
    bool (True = masked). The norm-pix target is cut out and normalised only where it is read. ``count`` as in
    ``per_sample_mean``."""
    grid = _patch_grid(images.float(), patch_size)  # a view: only the masked patches are cut out
    b, n = mask.nonzero(as_tuple=True)
    w = grid.shape[2]
    d = patch_size * patch_size * grid.shape[-1]  # explicit: a batch with no masked patch has n = 0
    target = norm_pix(grid[b, n // w, n % w].reshape(len(b), d))  # [n, p*p*3], patchify's order
    err = ((rows.float() - target) ** 2).mean(dim=-1)
    return per_sample_mean(err, b, mask.shape[0], count)


# ---- the scene stage of a base (model.scene): its terms and their weights ---------------------------------
SCENE_WEIGHTS = {"presence_loss": 1.0, "position_loss": 10.0, "kind_loss": 1.0, "size_loss": 1.0}


def scene_terms(out: torch.Tensor, targets: torch.Tensor, kinds: int) -> dict[str, torch.Tensor]:
    """``SceneTask``'s terms (unweighted, as every task's: ``total_loss`` weighs them with ``SCENE_WEIGHTS``) from
    its head's output [B, C, 3 + K + S] and the targets [B, C, 6] (``scene.SLOT_FIELDS``): presence BCE for every
    colour; for the colours that occur once, the centre's MSE (a linear read-out, no squashing: what a linear probe
    of the embedding can find), the kind's and the size's CE."""
    present, unique = targets[..., 0], targets[..., 1] > 0
    terms = {"presence_loss": F.binary_cross_entropy_with_logits(out[..., 0], present)}
    if unique.any():
        u, tu = out[unique], targets[unique]
        terms["position_loss"] = F.mse_loss(u[:, 1:3], tu[:, 2:4])
        terms["kind_loss"] = F.cross_entropy(u[:, 3:3 + kinds], tu[:, 4].long())
        terms["size_loss"] = F.cross_entropy(u[:, 3 + kinds:], tu[:, 5].long())
    else:
        zero = out.sum() * 0.0
        terms.update(position_loss=zero, kind_loss=zero, size_loss=zero)
    return terms


# ---- the language-model stage of a base (model.lm) ------------------------------------------------------------
LM_WEIGHTS = {"lm_loss": 1.0}


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``LMTask``'s term: the mean cross-entropy of the next token (``logits`` [n, V] at the n positions before
    the end-of-text tokens, ``targets`` [n] their rows of the head's vocabulary)."""
    return F.cross_entropy(logits.float(), targets)


# ---- the total: one convention for every task --------------------------------------------------------------------
def term_weights(w: LossWeights | dict[str, float]) -> dict[str, float]:
    """The weight of each named loss term (the ``*_loss`` keys a task's ``forward`` returns)."""
    return dict(w) if isinstance(w, dict) else dataclasses.asdict(w)


def total_loss(terms: dict[str, torch.Tensor], w: LossWeights | dict[str, float]) -> torch.Tensor:
    """The weighted sum of the ``*_loss`` keys of ``terms`` (the other keys are statistics); every task returns its
    terms unweighted and its total through here (MACCO: ``LossWeights``; scene: ``SCENE_WEIGHTS``; lm:
    ``LM_WEIGHTS``). A term without a weight is an error, not silently left out."""
    weights = term_weights(w)
    return sum(weights[k] * v for k, v in terms.items() if k.endswith("_loss") and k != "total_loss")
