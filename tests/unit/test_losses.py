"""model/losses.py: each loss term by hand and against naive loops, the fused vocabulary NLL, the weighted total."""
import math

import pytest
import torch

from model.losses import (LossWeights, contrast_loss, image_reconstruction_loss, intra_modal_loss, patchify,
                          per_sample_mean, term_weights, text_reconstruction_loss, total_loss, vocab_nll)
from model.task import MaccoConfig, MaccoTask
from reference_losses import masked_image_mse, masked_text_nll, text_log_probs
from tests_support import micro_batch as batch, micro_clip as clip  # noqa: F401 (fixtures)


def test_contrast_loss_hand_value():
    I, I_m = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    T, T_m = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    # rows [I; I_m] vs cols [T; T_m], labels [0, 0]: (log(1 + e^-1) + log(1 + e)) / 2 in each direction
    want = (math.log(1 + math.exp(-1)) + math.log(1 + math.e)) / 2
    assert contrast_loss([I, I_m], [T, T_m], torch.tensor(1.0)).item() == pytest.approx(want, rel=1e-6)
    # a hard negative column identical to T halves row 0's probability: log(2 + e^-1)...
    got = contrast_loss([I], [T], torch.tensor(1.0), hard_texts=T.clone()).item()
    assert got == pytest.approx((math.log(2) + 0.0) / 2, rel=1e-6)


def test_contrast_loss_equals_naive_loops():
    torch.manual_seed(3)
    B = 4
    I, I_m, T, T_m = (torch.nn.functional.normalize(torch.randn(B, 8), dim=-1) for _ in range(4))
    s = torch.tensor(7.0)
    imgs, txts = torch.cat([I, I_m]), torch.cat([T, T_m])
    total = 0.0
    for r in range(2 * B):
        logits = [s * imgs[r] @ txts[c] for c in range(2 * B)]
        total += -(logits[r % B] - torch.logsumexp(torch.stack(logits), 0))
    l_i2t = total / (2 * B)
    total = 0.0
    for r in range(2 * B):
        logits = [s * txts[r] @ imgs[c] for c in range(2 * B)]
        total += -(logits[r % B] - torch.logsumexp(torch.stack(logits), 0))
    want = (l_i2t + total / (2 * B)) / 2
    assert contrast_loss([I, I_m], [T, T_m], s).item() == pytest.approx(want.item(), rel=1e-5)
    naive = 0.0
    for r in range(B):
        a = torch.stack([s * T_m[r] @ T[c] for c in range(B)])
        b = torch.stack([s * T[r] @ T_m[c] for c in range(B)])
        naive += -(a[r] - torch.logsumexp(a, 0)) - (b[r] - torch.logsumexp(b, 0))
    assert intra_modal_loss(T, T_m, s).item() == pytest.approx((naive / (2 * B)).item(), rel=1e-5)


def test_text_reconstruction_hand_value():
    """Per sample first, then over the samples with any masked token (sample 1 has none); 0 with none at all."""
    V = 4
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1]])
    head = torch.nn.Linear(V, V)  # identity head: the logits are the hidden rows, log-probabilities already
    with torch.no_grad():
        head.weight.copy_(torch.eye(V))
        head.bias.zero_()
    targets, sample = torch.tensor([3, 0, 0]), torch.tensor([0, 0, 2])
    got = text_reconstruction_loss(probs.log(), head, targets, sample, batch=3)
    want = ((-math.log(0.4) + math.log(4)) / 2 - math.log(0.7)) / 2
    assert got.item() == pytest.approx(want, rel=1e-6)
    none = torch.tensor([], dtype=torch.long)
    assert text_reconstruction_loss(probs[:0].log(), head, none, none, 3) == 0
    assert per_sample_mean(torch.tensor([1.0, 3.0, 0.5]), sample, 3).item() == pytest.approx(1.25)
    assert per_sample_mean(torch.tensor([1.0, 3.0, 0.5]), sample, 3, torch.tensor(4.0)).item() == pytest.approx(0.625)


def test_fused_vocab_nll_equals_log_softmax_and_gather():
    """Values and all three gradients equal log_softmax(linear) + gather (float64 gradcheck included), for
    repeated targets, uneven incoming gradients and no rows at all."""
    torch.manual_seed(0)
    h = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(11, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(11, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([3, 3, 0, 10, 7, 3])
    up = torch.rand(6, dtype=torch.float64)
    ref = -torch.log_softmax(torch.nn.functional.linear(h, w, b), -1).gather(1, t[:, None]).squeeze(1)
    got = vocab_nll(h, w, b, t)
    assert torch.allclose(got, ref)
    g_ref = torch.autograd.grad((ref * up).sum(), (h, w, b))
    g_got = torch.autograd.grad((vocab_nll(h, w, b, t) * up).sum(), (h, w, b))
    assert all(torch.allclose(a, c) for a, c in zip(g_ref, g_got))
    assert torch.autograd.gradcheck(lambda h, w, b: vocab_nll(h, w, b, t), (h, w, b))
    assert torch.autograd.gradcheck(lambda h, w: vocab_nll(h, w, None, t), (h, w))
    hf, wf, bf = (x.detach().float().requires_grad_() for x in (h, w, b))
    ref32 = vocab_nll(hf, wf, bf, t)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # products in bf16, row statistics in fp32
        low = vocab_nll(hf, wf, bf, t)
    assert low.dtype == torch.float32 and torch.allclose(low, ref32, atol=0.1)
    for a, c in zip(torch.autograd.grad(low.sum(), (hf, wf, bf)), torch.autograd.grad(ref32.sum(), (hf, wf, bf))):
        assert a.dtype == torch.float32 and (a - c).abs().max() <= 0.05 * c.abs().max()
    empty = vocab_nll(h[:0], w, b, t[:0])
    assert empty.shape == (0,)
    empty.sum().backward()
    assert not w.grad.any()


def test_image_reconstruction_hand_value():
    img = torch.zeros(2, 3, 1, 2)
    img[0, :, 0, 0] = torch.tensor([1.0, 2.0, 3.0])  # patch (p=1) values -> mean 2, unbiased var 1
    img[0, :, 0, 1] = torch.tensor([1.0, 2.0, 3.0])
    pred = torch.zeros(2, 2, 3)
    mask = torch.tensor([[True, True], [False, False]])
    want = (2 / (1 + 1e-6)) / 3  # mean of (-1, 0, 1)^2 / (1 + 1e-6)
    assert masked_image_mse(pred, img, mask, 1).item() == pytest.approx(want / (1 + 1e-8), rel=1e-5)  # reference
    assert image_reconstruction_loss(pred[mask], img, mask, 1).item() == pytest.approx(want, rel=1e-6)
    assert image_reconstruction_loss(pred[:0, 0], img, torch.zeros_like(mask), 1) == 0
    x = torch.arange(2 * 3 * 4 * 4, dtype=torch.float).reshape(2, 3, 4, 4)
    p = patchify(x, 2)
    assert p.shape == (2, 4, 12) and p[0, 1, :3].tolist() == [x[0, 0, 0, 2].item(), x[0, 1, 0, 2].item(),
                                                              x[0, 2, 0, 2].item()]


def test_total_is_the_weighted_sum_of_the_loss_keys():
    names = ("contrast_loss", "intra_modal_contrast_loss", "text_reconstruction_loss", "image_reconstruction_loss")
    assert set(term_weights(LossWeights())) == set(names)
    terms = {k: torch.tensor(1.0) for k in names} | {"masked_word_acc": torch.tensor(5.0)}  # a statistic: left out
    assert total_loss(terms, LossWeights()).item() == pytest.approx(1 + 0.1 + 20 + 250)
    with pytest.raises(KeyError, match="unweighted_loss"):  # every *_loss term has a weight
        total_loss({"unweighted_loss": torch.tensor(1.0)}, LossWeights())


@pytest.mark.parametrize("self_layers", [0, 1])
def test_text_reconstruction_at_masked_positions_equals_the_all_position_loss(clip, batch, self_layers):
    """The training path (``predict`` at the masked positions, the head fused with its NLL) gives the reference's
    loss from log-probabilities at all 77 positions."""
    img, t, tm, im = batch
    tp = MaccoTask(clip, MaccoConfig(text_self_layers=self_layers)).text_predictor
    x = torch.randn(3, 77, 32)
    g = torch.randn(3, 32)
    y, yg = torch.randn(3, 16, 32), torch.randn(3, 32)
    ref = masked_text_nll(text_log_probs(tp, x, g, y, yg), t, tm)
    ours = text_reconstruction_loss(tp.predict(x, g, y, yg, tm), tp.head, t[tm], tm.nonzero()[:, 0], 3)
    assert torch.allclose(ours, ref, atol=1e-5)


def test_a_term_is_one_declared_entry():
    """A loss term's weight, its config key and its report label are one LossWeights field: the report's gradient
    rows and a run's loss_weights keys follow the fields."""
    import dataclasses

    from model.losses import TERM_LABELS, LossWeights, term_weights
    from model.train_config import TrainConfig
    from pipeline.report import probe_rows

    names = [f.name for f in dataclasses.fields(LossWeights)]
    assert [t for t, _ in TERM_LABELS] == names == list(term_weights(LossWeights()))
    assert set(TrainConfig().loss_weights) == set(names)
    grads = [label for label, path, _ in probe_rows(TERM_LABELS) if path[0] == "gradient_norms"]
    assert grads == [f"grad ‖{tower}‖ ← {label}" for tower in ("text", "image") for _, label in TERM_LABELS]
    assert dict(TERM_LABELS)["intra_modal_contrast_loss"] == "MIR"


def test_the_reports_ce_clip_rows_are_the_terms_its_modes_weight(clip):
    """``CE_CLIP_TERM_LABELS`` names the terms ``ce_clip_terms`` adds to the contrast and the ones a ce-clip mode's
    task weights (CE-CLIP's 0.2 / 0.2): the report's gradient rows follow them."""
    from model.hardneg import CE_CLIP_SLOTS, CeClipConfig, ce_clip_terms, initial_threshold
    from model.losses import CE_CLIP_TERM_LABELS, REPORT_TERMS, TERM_LABELS
    from model.task import MaccoConfig
    from model.task_hardneg import HardNegativeTask

    f = torch.nn.functional.normalize
    x, n = f(torch.randn(3, 8), dim=-1), f(torch.randn(3, CE_CLIP_SLOTS, 8), dim=-1)
    terms, _ = ce_clip_terms(x, x.flip(0), n, torch.ones(3, CE_CLIP_SLOTS, dtype=torch.bool), torch.tensor(10.0),
                             initial_threshold(CeClipConfig(), CE_CLIP_SLOTS))
    names = [t for t, _ in CE_CLIP_TERM_LABELS]
    assert set(terms) - {"contrast_loss", "total_loss"} == set(names)
    assert REPORT_TERMS == TERM_LABELS + CE_CLIP_TERM_LABELS and dict(CE_CLIP_TERM_LABELS) == {"imc_loss": "IMC",
                                                                                                "cmr_loss": "CMR"}
    task = HardNegativeTask(clip, MaccoConfig(mode="macco+ce-clip"))
    assert {t: task.weights[t] for t in names} == {"imc_loss": 0.2, "cmr_loss": 0.2}
    assert not set(names) & set(HardNegativeTask(clip, MaccoConfig(mode="negclip")).weights)
