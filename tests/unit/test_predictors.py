"""model/predictors.py: the predictors compute only the masked queries (same values and gradients), attention equals
``nn.MultiheadAttention``, the 2-D sin-cos positions."""
import open_clip
import pytest
import torch

from model.predictors import CrossAttentionBlock, sincos_2d
from model.slots import take
from model.task import MaccoConfig, MaccoTask, predictor_heads
from reference_losses import image_predictions, text_hidden
from tests_support import micro_batch as batch, micro_clip as clip  # noqa: F401 (fixtures)


def test_predictors_run_only_the_masked_queries_with_the_same_outputs_and_gradients(clip, batch):
    """Cross-attention-only predictors compute just the masked positions; values and input gradients equal the
    full computation's there; encoder-packed queries (``slots``) give the same; with self-attention layers
    everything is computed (no slots) and the same rows are returned."""
    _, _, tm, im = batch
    task = MaccoTask(clip, MaccoConfig())
    tp, ip = task.text_predictor, task.image_predictor
    torch.manual_seed(2)
    x, g = torch.randn(3, 77, 32, requires_grad=True), torch.randn(3, 32)
    y, yg = torch.randn(3, 16, 32, requires_grad=True), torch.randn(3, 32)
    full = text_hidden(tp, x, g, y, yg)[tm]
    part = tp.predict(x, g, y, yg, tm)
    assert torch.allclose(part, full, atol=1e-5)
    gf = torch.autograd.grad(full.sum(), (x, y))
    gp = torch.autograd.grad(part.sum(), (x, y))
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(gf, gp))
    slots = tp.slots(tm)
    assert torch.equal(tp.predict(take(x, slots[0]), g, y, yg, tm, slots=slots), part)  # what the step passes
    xi, ti = torch.randn(3, 16, 32, requires_grad=True), torch.randn(3, 77, 32)
    full = image_predictions(ip, xi, g, ti, yg)[im]
    part = ip.predict(xi, g, ti, yg, im)
    assert torch.allclose(part, full, atol=1e-5)
    assert torch.allclose(*[torch.autograd.grad(o.sum(), xi)[0] for o in (full, part)], atol=1e-5)
    slots = ip.slots(im, int(im.sum(1).max()))
    assert torch.equal(ip.predict(take(xi, slots[0]), g, ti, yg, im, slots=slots), part)
    none_t, none_i = torch.zeros_like(tm), torch.zeros_like(im)  # a batch with no masked position at all
    assert tp.predict(x, g, y, yg, none_t).shape == (0, 32)
    assert ip.predict(xi, g, ti, yg, none_i).shape == (0, 3 * task.patch_size ** 2)
    with_self = MaccoTask(clip, MaccoConfig(text_self_layers=1, image_self_layers=1))
    wt, wi = with_self.text_predictor, with_self.image_predictor
    assert wt.slots(tm) is None and wi.slots(im) is None
    assert torch.equal(wi.predict(xi, g, ti, yg, im), image_predictions(wi, xi, g, ti, yg)[im])
    assert torch.equal(wt.predict(x, g, y, yg, tm), text_hidden(wt, x, g, y, yg)[tm])
    with pytest.raises(ValueError, match="cross-attention-only"):
        wi.predict(take(xi, slots[0]), g, ti, yg, im, slots=slots)


def test_attention_equals_nn_multihead_attention_and_heads_rule():
    torch.manual_seed(4)
    for heads in (1, 2, 8):
        blk = CrossAttentionBlock(64, heads)
        blk.init_reference(2)
        torch.nn.init.normal_(blk.attn.in_proj_bias)
        q, kv = torch.randn(3, 5, 64, requires_grad=True), torch.randn(3, 9, 64, requires_grad=True)
        for k in (kv, q):  # cross- and self-attention
            ours, ref = blk.attend(q, k), blk.attn(q, k, k, need_weights=False)[0]
            assert torch.allclose(ours, ref, atol=1e-5)
            params = (q, kv, blk.attn.in_proj_weight, blk.attn.in_proj_bias, blk.attn.out_proj.weight)
            ga = torch.autograd.grad(ours.square().sum(), params, allow_unused=True)
            gb = torch.autograd.grad(ref.square().sum(), params, allow_unused=True)
            assert all((a is None and b is None) or torch.allclose(a, b, atol=1e-4) for a, b in zip(ga, gb))
    assert [predictor_heads(w) for w in (512, 768, 256, 128, 64, 32, 16)] == [8, 8, 8, 4, 2, 1, 1]
    with pytest.raises(ValueError, match="do not divide"):
        MaccoTask(open_clip.create_model("macco-micro"), MaccoConfig(predictor_heads=3))


def test_sincos_positions():
    pe = sincos_2d(8, 3)
    assert pe.shape == (9, 8)
    assert torch.allclose(pe[0, :2], torch.tensor([0.0, 0.0])) and torch.allclose(pe[0, 2:4], torch.ones(2))
    assert torch.allclose(pe[1, 4:], pe[0, 4:])  # same row -> same h half
    assert torch.allclose(pe[3, :4], pe[0, :4])  # same column -> same w half
