"""model/hardneg.py: NegCLIP's loss against a reference written from the paper (checked by hand on a 2 x 2 case),
CE-CLIP's terms against their own ``Clip_DALoss`` (vendored in tests/vendor/ce_clip_loss.py), values and gradients,
for every option, over several steps so the carried threshold is exercised."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from model.hardneg import CeClipConfig, ce_clip_terms, initial_threshold, negclip_loss
from model.losses import contrast_loss
from vendor.ce_clip_loss import Clip_DALoss


def _unit(*shape, gen):
    return F.normalize(torch.randn(*shape, generator=gen, dtype=torch.float64), dim=-1)


def negclip_reference(images, texts, negatives, scale, mask):
    """The paper's loss written out: for each image a softmax over every caption of the batch and every present
    hard-negative caption, its own caption the target; for each caption a softmax over the batch's images."""
    B, K, _ = negatives.shape
    i2t = []
    for i in range(B):
        pos = torch.exp(scale * images[i] @ texts[i])
        den = sum(torch.exp(scale * images[i] @ texts[j]) for j in range(B))
        den = den + sum(torch.exp(scale * images[i] @ negatives[c, k]) for c in range(B) for k in range(K)
                        if mask[c, k])
        i2t.append(-torch.log(pos / den))
    t2i = []
    for j in range(B):
        pos = torch.exp(scale * texts[j] @ images[j])
        den = sum(torch.exp(scale * texts[j] @ images[i]) for i in range(B))
        t2i.append(-torch.log(pos / den))
    return (sum(i2t) / B + sum(t2i) / B) / 2


def test_negclip_by_hand_on_two_pairs():
    # images = captions = the two axes; each caption's negative is the other caption; s = 1
    I = torch.eye(2, dtype=torch.float64)
    N = torch.stack([I[1:2], I[0:1]])  # [2, 1, 2]
    scale = torch.tensor(1.0, dtype=torch.float64)
    e = math.e
    t2i = math.log(1 + 1 / e)  # each caption: logits (1, 0), target the 1
    # every negative present: image 0 sees (1, 0 | 0, 1) with target the first 1, image 1 the mirror
    want = (math.log(2 + 2 / e) + t2i) / 2
    assert negclip_loss(I, I, N, scale).item() == pytest.approx(want, abs=1e-12)
    mask = torch.tensor([[True], [False]])  # caption 1 has no negative: image 0 sees (1, 0 | 0), image 1 (0, 1 | 1)
    want = ((math.log(1 + 2 / e) + math.log(2 + 1 / e)) / 2 + t2i) / 2
    assert negclip_loss(I, I, N, scale, mask).item() == pytest.approx(want, abs=1e-12)
    for m in (torch.ones(2, 1, dtype=torch.bool), mask):
        assert negclip_reference(I, I, N, scale, m).item() == pytest.approx(
            negclip_loss(I, I, N, scale, m).item(), abs=1e-12)


@pytest.mark.parametrize("with_mask", [False, True])
def test_negclip_equals_the_paper_reference_values_and_gradients(with_mask):
    gen = torch.Generator().manual_seed(3)
    B, K, E = 5, 3, 8
    I, T, N = (_unit(B, E, gen=gen), _unit(B, E, gen=gen), _unit(B, K, E, gen=gen))
    mask = torch.ones(B, K, dtype=torch.bool)
    if with_mask:
        mask = torch.rand(B, K, generator=gen) > 0.4
        mask[0] = False  # a caption with no negative at all
    feats = [t.clone().requires_grad_() for t in (I, T, N)]
    scale = torch.tensor(14.0, dtype=torch.float64, requires_grad=True)
    ours = negclip_loss(*feats, scale, mask if with_mask else None)
    ref = negclip_reference(*feats, scale, mask)
    assert ours.item() == pytest.approx(ref.item(), abs=1e-12)
    g_ours = torch.autograd.grad(ours, feats + [scale])
    g_ref = torch.autograd.grad(ref, feats + [scale])
    for a, b in zip(g_ours, g_ref):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    # the same loss as the training step's contrast term handed the present negatives as extra columns
    present = N.reshape(-1, E)[mask.reshape(-1)]
    assert contrast_loss([I], [T], scale, present).item() == pytest.approx(ours.item(), abs=1e-12)


def test_shapes_are_checked():
    I = torch.zeros(2, 4)
    with pytest.raises(ValueError, match=r"negatives \(2, 4\) must be \[B, K, E\]"):
        negclip_loss(I, I, torch.zeros(2, 4), torch.tensor(1.0))
    with pytest.raises(ValueError, match=r"mask \(2, 2\) must be \[B, K\] = \(2, 3\)"):
        negclip_loss(I, I, torch.zeros(2, 3, 4), torch.tensor(1.0), torch.ones(2, 2))
    with pytest.raises(ValueError, match="threshold_type 'median'"):
        CeClipConfig(threshold_type="median")


def _theirs_step(loss, I, T, N, mask, scale, thresholds, config):
    """One step of their training loop (src/training/train.py: the loss, then the clamp of a learnt threshold)."""
    B, K, E = N.shape
    total, thresholds, cmr, imc = loss(I, torch.cat([T, N.reshape(B * K, E)]), mask, scale, thresholds)
    if config.threshold_type != "fixed" and thresholds is not None and config.upper_bound is not None:
        thresholds = torch.clamp(thresholds, 0, config.upper_bound)
    return total, thresholds, cmr, imc


OPTIONS = [dict(threshold_type=t, hardnegative=h, imc=i, cmr=c)
           for t in ("mean", "max", "fixed") for h in (True, False) for i in (True, False) for c in (True, False)
           if c or t == "mean"]  # without the rank loss the threshold type plays no part


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_ce_clip_terms_equal_their_clip_daloss_over_steps(options):
    config = CeClipConfig(**options)
    theirs_loss = Clip_DALoss(cache_labels=True, cmr_loss=config.cmr, imc_loss=config.imc,
                              hardnegative=config.hardnegative, imc_loss_weight=config.imc_weight,
                              cmr_loss_weight=config.cmr_weight, threshold_type=config.threshold_type)
    gen = torch.Generator().manual_seed(7)
    B, K, E = 6, 4, 16
    theirs_th = (config.fixed_threshold if config.threshold_type == "fixed" else 0.0) if config.cmr else None
    ours_th = initial_threshold(config, K, dtype=torch.float64)
    rank_values = []
    for step in range(4):
        I = _unit(B, E, gen=gen)
        T = F.normalize(I + 0.6 * _unit(B, E, gen=gen), dim=-1)  # matched pairs
        N = F.normalize(T.unsqueeze(1) + 0.9 * _unit(B, K, E, gen=gen), dim=-1)  # hard: near their caption
        mask = (torch.rand(B, K, generator=gen) > 0.3).long()  # a collated list of 0/1, as their data give
        mask[step % B] = 0  # a caption with no valid negative
        mask[(step + 1) % B] = 1  # every type present somewhere (their mean threshold is NaN otherwise)
        scale = torch.tensor(20.0, dtype=torch.float64)
        ours_in = [t.clone().requires_grad_() for t in (I, T, N, scale)]
        their_in = [t.clone().requires_grad_() for t in (I, T, N, scale)]
        terms, ours_th = ce_clip_terms(*ours_in[:3], mask, ours_in[3], ours_th, config)
        total, theirs_th, cmr, imc = _theirs_step(theirs_loss, their_in[0], their_in[1], their_in[2], mask,
                                                  their_in[3], theirs_th, config)
        assert terms["total_loss"].item() == pytest.approx(total.item(), abs=1e-12), step
        if config.cmr:
            assert terms["cmr_loss"].item() == pytest.approx(cmr.item(), abs=1e-12)
            rank_values.append(terms["cmr_loss"].item())
            their_rows = torch.as_tensor(theirs_th, dtype=torch.float64).expand(B, K)
            torch.testing.assert_close(ours_th.expand(B, K), their_rows, atol=1e-12, rtol=0)
        else:
            assert "cmr_loss" not in terms
        if config.imc:
            assert terms["imc_loss"].item() == pytest.approx(imc.item(), abs=1e-12)
        else:
            assert "imc_loss" not in terms
        weighted = config.cmr_weight * cmr + config.imc_weight * imc
        assert terms["contrast_loss"].item() == pytest.approx((total - weighted).item(), abs=1e-12)
        ours_g = torch.autograd.grad(terms["total_loss"], ours_in, allow_unused=True)
        their_g = torch.autograd.grad(total, their_in, allow_unused=True)
        for a, b, x in zip(ours_g, their_g, ours_in):
            # with no term reading the negatives ours leaves them out of the graph, theirs gives them zeros
            torch.testing.assert_close(torch.zeros_like(x) if a is None else a, b, atol=1e-12, rtol=0)
    if config.cmr:
        assert max(rank_values) > 0  # the rank term is exercised, not zero throughout
    if config.cmr and config.threshold_type != "fixed":
        assert (ours_th > 0).any()  # the carried threshold moved off its start


def test_mean_threshold_of_a_type_with_no_negative_keeps_its_previous_value_where_theirs_is_nan():
    config = CeClipConfig(threshold_type="mean")
    gen = torch.Generator().manual_seed(1)
    B, K, E = 4, 3, 8
    I, T, N = (_unit(B, E, gen=gen), _unit(B, E, gen=gen), _unit(B, K, E, gen=gen))
    mask = torch.ones(B, K, dtype=torch.long)
    mask[:, 1] = 0  # no caption of the batch has a negative of type 1
    previous = torch.tensor([0.5, 0.7, 0.9], dtype=torch.float64)
    scale = torch.tensor(10.0, dtype=torch.float64)
    terms, th = ce_clip_terms(I, T, N, mask, scale, previous, config)
    assert th[1].item() == pytest.approx(0.7) and torch.isfinite(terms["total_loss"])
    _, their_th, _, _ = _theirs_step(Clip_DALoss(cmr_loss=True, imc_loss=True, hardnegative=True), I, T, N, mask,
                                     scale, previous.expand(B, K), config)
    assert torch.isnan(their_th[:, 1]).all()
    torch.testing.assert_close(th[[0, 2]], their_th[0, [0, 2]], atol=1e-12, rtol=0)


def test_one_negative_per_caption_keeps_its_shape():
    gen = torch.Generator().manual_seed(2)
    I, T, N = (_unit(3, 8, gen=gen), _unit(3, 8, gen=gen), _unit(3, 1, 8, gen=gen))
    terms, th = ce_clip_terms(I, T, N, torch.ones(3, 1), torch.tensor(5.0), initial_threshold(CeClipConfig(), 1))
    assert th.shape == (1,) and torch.isfinite(terms["total_loss"])
