import math

import open_clip
import pytest
import torch

from model.factory import register_model_configs
from model.losses import (LossWeights, contrast_loss, image_reconstruction_loss, intra_modal_loss, patchify,
                          per_sample_mean, term_weights, text_reconstruction_loss, total_loss, vocab_nll)
from model.masked import (encode_image_pair, encode_image_tokens, encode_text_pair, encode_text_tokens,
                          encode_text_trimmed, plain_last_block, supports_trimmed_text)
from model.predictors import CrossAttentionBlock, sincos_2d
from model.slots import query_slots, take
from model.task import MaccoConfig, MaccoTask, predictor_heads
from reference_losses import (image_predictions, masked_image_mse, masked_text_nll, reference_terms, text_hidden,
                              text_log_probs)


@pytest.fixture(scope="module")
def clip():
    register_model_configs()
    torch.manual_seed(0)
    return open_clip.create_model("macco-micro")


@pytest.fixture(scope="module")
def batch():
    tok = open_clip.get_tokenizer("macco-micro")
    t = tok(["a red circle left of a blue square", "a dog on a couch", "two cats"])
    torch.manual_seed(1)
    img = torch.randn(3, 3, 32, 32)
    tm = torch.zeros(3, 77, dtype=torch.bool)
    tm[0, 2] = tm[0, 4] = tm[1, 3] = True
    im = torch.zeros(3, 16, dtype=torch.bool)
    im[0, :4] = im[1, 5:9] = True
    return img, t, tm, im


def test_trimmed_text_encoding_equals_encode_text(clip, batch):
    """Padding after the last EOT is dropped; under the causal mask the EOT features are unchanged."""
    _, t, _, _ = batch
    with torch.no_grad():
        assert torch.allclose(encode_text_trimmed(clip, t), clip.encode_text(t), atol=1e-5)
        long = open_clip.get_tokenizer("macco-micro")(["word " * 100])  # truncated: EOT at position 76
        assert torch.allclose(encode_text_trimmed(clip, long), clip.encode_text(long), atol=1e-5)
    assert supports_trimmed_text(clip)
    clip.attn_mask, saved = None, clip.attn_mask  # a non-causal text tower is refused
    try:
        assert not supports_trimmed_text(clip)
        with pytest.raises(ValueError, match="causal"):
            encode_text_trimmed(clip, t)
    finally:
        clip.attn_mask = saved


def test_masked_encoders_equal_plain_towers_when_nothing_masked(clip, batch):
    img, t, _, _ = batch
    tok, g = encode_text_tokens(clip, t, torch.zeros_like(t, dtype=torch.bool), torch.randn(32))
    assert torch.allclose(g, clip.encode_text(t), atol=1e-6) and tok.shape == (3, 77, 32)
    cls, patches = encode_image_tokens(clip.visual, img, torch.zeros(3, 16, dtype=torch.bool), torch.randn(32))
    assert torch.allclose(cls, clip.encode_image(img), atol=1e-6) and patches.shape == (3, 16, 32)


def test_mask_changes_only_what_it_should(clip, batch):
    img, t, tm, im = batch
    token = torch.randn(32)
    tok0, _ = encode_text_tokens(clip, t)
    tok1, _ = encode_text_tokens(clip, t, tm, token)
    # causal text tower: positions before the first masked one are unchanged
    assert torch.allclose(tok0[0, :2], tok1[0, :2], atol=1e-6) and not torch.allclose(tok0[0, 2], tok1[0, 2])
    assert torch.allclose(tok0[2], tok1[2], atol=1e-6)  # sample without mask unchanged


def test_training_pairs_equal_separate_full_length_encodings(clip, batch):
    """The image pair (one 2B batch, patch embedding shared) and the text pair (masked copy cut after the last
    position read from it) give what two separate full-length encodings give, in value and in gradient; the
    task's own length is the batch's last EOT or masked position + 1."""
    img, t, tm, im = batch
    token = torch.randn(32, requires_grad=True)
    (f_cls, f_p), (m_cls, m_p) = encode_image_pair(clip.visual, img, im, token)
    r_cls, r_p = encode_image_tokens(clip.visual, img)
    rm_cls, rm_p = encode_image_tokens(clip.visual, img, im, token)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in ((f_cls, r_cls), (f_p, r_p), (m_cls, rm_cls), (m_p, rm_p)))
    tm = tm.clone()
    tm[2, 3] = True
    n = MaccoTask.step_sizes(t, tm, im)[0]
    assert n == int(t.argmax(-1).max()) + 1 < 77
    (f_tok, f_g), (m_tok, m_g) = encode_text_pair(clip, t, tm, token, n)
    ref_tok, ref_g = encode_text_tokens(clip, t, tm, token)
    assert f_tok.shape == (3, 77, 32) and m_tok.shape == (3, n, 32)
    assert torch.allclose(f_g, clip.encode_text(t), atol=1e-5) and torch.allclose(m_g, ref_g, atol=1e-5)
    assert torch.allclose(m_tok[tm[:, :n]], ref_tok[tm], atol=1e-5)
    g_pair = torch.autograd.grad(m_tok[tm[:, :n]].sum() + m_g.sum(), (token, clip.token_embedding.weight))
    g_ref = torch.autograd.grad(ref_tok[tm].sum() + ref_g.sum(), (token, clip.token_embedding.weight))
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(g_pair, g_ref))
    late = torch.zeros_like(tm)
    late[0, 60] = True  # a mask past every EOT (a word piece matching padding) still lies inside the cut
    assert MaccoTask.step_sizes(t, late, im) == [61, 1, 4]


@pytest.fixture(scope="module")
def clip3():
    """macco-micro with 3 blocks per tower: blocks run before the cut last one."""
    import json

    from model.factory import CONFIG_DIR

    cfg = json.loads((CONFIG_DIR / "macco-micro.json").read_text())
    cfg["vision_cfg"]["layers"] = cfg["text_cfg"]["layers"] = 3
    torch.manual_seed(0)
    return open_clip.CLIP(**cfg)


@pytest.mark.parametrize("tower", ["clip", "clip3"])
def test_masked_copies_are_computed_only_where_the_step_reads_them(request, tower, batch):
    """With query slots the masked copies' last blocks run only at the EOT/CLS and the masked positions: the
    features there and every gradient equal the full computation's; a tower whose last block cannot be cut
    (patch dropout) gives the same through the fallback, and so does gradient checkpointing."""
    clip = request.getfixturevalue(tower)
    img, t, tm, im = batch
    token = torch.randn(32, requires_grad=True)
    n = MaccoTask.step_sizes(t, tm, im)[0]
    params = [token] + [p for p in clip.parameters() if p.requires_grad]

    def check(encode, mask):
        idx, valid = query_slots(mask, None)
        assert (~valid).any()  # a sample with fewer masked positions than the largest count: padded slots
        (f_a, f_b), (m_glob, m_q) = encode(idx)
        (r_a, r_b), (r_glob, r_all) = encode(None)
        assert m_q.shape[:2] == idx.shape and torch.allclose(m_q[valid], r_all[mask], atol=1e-5)
        assert torch.allclose(m_glob, r_glob, atol=1e-5)
        assert torch.allclose(f_a, r_a, atol=1e-6) and torch.allclose(f_b, r_b, atol=1e-6)
        w = torch.randn_like(m_q[valid])
        g_cut = torch.autograd.grad((m_q[valid] * w).sum() + m_glob.square().sum() + f_b.sum(), params,
                                    allow_unused=True)
        g_ref = torch.autograd.grad((r_all[mask] * w).sum() + r_glob.square().sum() + r_b.sum(), params,
                                    allow_unused=True)
        for a, b in zip(g_cut, g_ref):
            assert (a is None) == (b is None) or not (a if a is not None else b).any()
            if a is not None and b is not None:
                # float32 rounding relative to the gradient's scale (~4e3 on the 3-block towers)
                scale = max(1.0, b.abs().max().item())
                assert torch.allclose(a, b, atol=1e-6 * scale), (a - b).abs().max() / scale

    def text_pair(q):  # (global, tokens) per copy, as the image pair
        return tuple(c[::-1] for c in encode_text_pair(clip, t, tm, token, n, q))

    check(text_pair, tm[:, :n])
    check(lambda q: encode_image_pair(clip.visual, img, im, token, q), im)
    assert plain_last_block(clip.visual.transformer) and plain_last_block(clip.transformer)
    saved = clip.visual.patch_dropout
    clip.visual.patch_dropout = open_clip.transformer.PatchDropout(0.5)  # moves tokens: the cut is refused
    clip.visual.patch_dropout.eval()  # (identity in eval mode, so the reference is still comparable)
    try:
        check(lambda q: encode_image_pair(clip.visual, img, im, token, q), im)
    finally:
        clip.visual.patch_dropout = saved
    clip.set_grad_checkpointing(True)
    try:
        check(lambda q: encode_image_pair(clip.visual, img, im, token, q), im)
        check(text_pair, tm[:, :n])
    finally:
        clip.set_grad_checkpointing(False)


def grads(task, loss):
    task.zero_grad()
    loss.backward(retain_graph=True)
    def has(ps):
        return any(p.grad is not None and p.grad.abs().sum() > 0 for p in ps)
    clip = task.clip
    return {
        "text_encoder": has([p for n, p in clip.named_parameters() if not n.startswith("visual") and n != "logit_scale"]),
        "image_encoder": has(clip.visual.parameters()),
        "text_predictor": has(task.text_predictor.parameters()),
        "image_predictor": has(task.image_predictor.parameters()),
        "text_mask_token": has([task.text_mask_token]), "img_mask_token": has([task.img_mask_token]),
        "logit_scale": has([clip.logit_scale]),
    }


def test_stop_gradient_map_matches_reference(clip, batch):
    torch.manual_seed(0)
    task = MaccoTask(clip, MaccoConfig())
    out = task.terms(*batch)
    g = grads(task, out["text_reconstruction_loss"])
    assert g == {"text_encoder": True, "image_encoder": False, "text_predictor": True, "image_predictor": False,
                 "text_mask_token": True, "img_mask_token": False, "logit_scale": False}
    g = grads(task, out["image_reconstruction_loss"])
    assert g == {"text_encoder": True, "image_encoder": False, "text_predictor": False, "image_predictor": True,
                 "text_mask_token": False, "img_mask_token": False, "logit_scale": False}
    for term in ("contrast_loss", "intra_modal_contrast_loss"):
        g = grads(task, out[term])
        assert g["text_encoder"] and g["image_encoder"] and g["text_mask_token"] and g["img_mask_token"]
        assert g["logit_scale"] and not g["text_predictor"] and not g["image_predictor"]


@pytest.mark.parametrize("cfg", [{}, {"text_self_layers": 1, "image_self_layers": 1}])
def test_task_step_equals_the_plain_reference_computation(clip, batch, cfg):
    """Every shortcut of the training step (text pair cut after the last read position, masked copies' last
    blocks only where read, shared patch embedding, masked-only predictor queries, fused vocabulary NLL, one
    host sync) leaves the loss terms and every parameter's gradient as the plain computation gives them; with
    self-attention predictor layers (every query needed) too."""
    torch.manual_seed(3)
    task = MaccoTask(clip, MaccoConfig(**cfg))
    out = task.terms(*batch)
    terms, total = reference_terms(task, *batch)
    _, t, tm, im = batch
    given = task.terms(*batch, sizes=MaccoTask.step_sizes(t, tm, im))  # the loop's host-side shapes: the same step
    for k, v in terms.items():
        assert torch.allclose(out[k], v, rtol=1e-4, atol=1e-6), k
        assert torch.equal(given[k], out[k]), k
    params = [p for p in task.parameters() if p.requires_grad]
    got = torch.autograd.grad(out["total_loss"], params, allow_unused=True)
    want = torch.autograd.grad(total, params, allow_unused=True)
    names = [n for n, p in task.named_parameters() if p.requires_grad]
    for n, a, b in zip(names, got, want):
        assert (a is None) == (b is None), n
        if a is not None:
            assert torch.allclose(a, b, rtol=1e-3, atol=1e-6), n


@pytest.mark.parametrize("mode", ["macco", "text-only"])
def test_predicted_words_are_the_plain_computations_argmax(clip, batch, mode):
    """The reconstruction probe's words (``MaccoTask.predicted_words``: the training step's path, with its
    shortcuts) are the argmax of the plain computation's vocabulary log-probabilities at the masked words, each
    caption against its full image."""
    torch.manual_seed(5)
    task = MaccoTask(clip, MaccoConfig(mode=mode)).eval()
    img, t, tm, _ = batch
    tok, glob = encode_text_tokens(clip, t, tm, task.text_mask_token)
    i_glob, i_tok = encode_image_tokens(clip.visual, img)
    with torch.no_grad():
        want = text_log_probs(task.text_predictor, tok, glob, i_tok, i_glob).argmax(-1)[tm]
    assert tm.any() and torch.equal(task.predicted_words(img, t, tm), want)


@pytest.mark.parametrize("mode,terms", [
    ("macco", {"contrast_loss", "intra_modal_contrast_loss", "text_reconstruction_loss", "image_reconstruction_loss"}),
    ("clip-ft", {"contrast_loss"}),
    ("text-only", {"contrast_loss", "intra_modal_contrast_loss", "text_reconstruction_loss"}),
    ("image-only", {"contrast_loss", "intra_modal_contrast_loss", "image_reconstruction_loss"}),
])
def test_every_mode_runs_with_and_without_hard_negatives(clip, batch, mode, terms):
    img, t, tm, im = batch
    for hardneg in (False, True):
        task = MaccoTask(clip, MaccoConfig(mode=mode, hardneg=hardneg))
        out = task.terms(img, t, tm, im, hard_texts=t.flip(0) if hardneg else None)
        assert {k for k in out if "_loss" in k and k != "total_loss"} == terms
        assert torch.isfinite(out["total_loss"])
        out["total_loss"].backward()


def test_clip_ft_is_plain_clip_loss(clip, batch):
    img, t, tm, im = batch
    out = MaccoTask(clip, MaccoConfig(mode="clip-ft")).terms(img, t, tm, im)
    ref = open_clip.ClipLoss()(torch.nn.functional.normalize(clip.encode_image(img), dim=-1),
                               torch.nn.functional.normalize(clip.encode_text(t), dim=-1), clip.logit_scale.exp())
    assert torch.allclose(out["contrast_loss"], ref, atol=1e-6)


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


def test_ablation_flags_drop_mca_negatives_and_the_mir_term(clip, batch):
    """macco without MCA contrasts the full pairs only (the CLIP-FT contrast on the same weights); without MIR
    there is no intra-modal term; the reconstruction terms are unchanged by either."""
    img, t, tm, im = batch
    torch.manual_seed(3)
    full = MaccoTask(clip, MaccoConfig(mode="macco"))
    outs = {}
    for name, kw in {"full": {}, "no_mca": {"mca": False}, "no_mir": {"mir": False}, "ft": {"mode": "clip-ft"}}.items():
        task = MaccoTask(clip, MaccoConfig(**{"mode": "macco", **kw}))
        task.load_state_dict(full.state_dict())
        with torch.no_grad():
            outs[name] = task.terms(img, t, tm, im)
    assert torch.allclose(outs["no_mca"]["contrast_loss"], outs["ft"]["contrast_loss"], atol=1e-5)
    assert not torch.allclose(outs["full"]["contrast_loss"], outs["ft"]["contrast_loss"], atol=1e-3)
    assert "intra_modal_contrast_loss" not in outs["no_mir"]
    assert torch.allclose(outs["no_mir"]["contrast_loss"], outs["full"]["contrast_loss"])
    for k in ("text_reconstruction_loss", "image_reconstruction_loss"):
        assert torch.allclose(outs["no_mca"][k], outs["full"][k]) and torch.allclose(outs["no_mir"][k], outs["full"][k])


def test_clip_ft_step_runs_the_text_trimmed_and_equals_the_plain_clip_loss(clip, batch):
    img, t, tm, im = batch
    task = MaccoTask(clip, MaccoConfig(mode="clip-ft"))
    sizes = task.step_sizes(t, tm, im)
    assert sizes[0] < t.shape[1]  # the batch's last EOT is well before position 77
    with torch.no_grad():
        out = task.terms(img, t, tm, im, sizes=sizes)
        I = torch.nn.functional.normalize(clip.encode_image(img), dim=-1)
        T = torch.nn.functional.normalize(clip.encode_text(t), dim=-1)
        ref = contrast_loss([I], [T], clip.logit_scale.exp())
    assert torch.allclose(out["contrast_loss"], ref, atol=1e-6)
