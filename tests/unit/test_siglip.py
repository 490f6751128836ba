"""SigLIP masked encoding (model/siglip.py) on ``macco-siglip-tiny``: a timm trunk without class token pooled by
MAP, a bidirectional text tower pooled at the last slot. Nothing masked = the plain tower; masked = the plain
tower run with the mask token in place of the masked embeddings (before the positions)."""
from __future__ import annotations

import pytest
import torch

from model.factory import register_model_configs
from model.siglip import encode_siglip_image, encode_siglip_text, is_siglip_text, is_siglip_visual


@pytest.fixture(scope="module")
def siglip():
    import open_clip

    register_model_configs()
    torch.manual_seed(0)
    return open_clip.create_model("macco-siglip-tiny").eval()


def test_tiny_siglip_has_the_siglip_shape(siglip):
    assert is_siglip_visual(siglip.visual) and is_siglip_text(siglip)
    assert siglip.visual.trunk.cls_token is None and siglip.visual.trunk.attn_pool is not None
    assert siglip.text.attn_mask is None and siglip.text.pool_type == "last"
    assert siglip.logit_bias.item() == -10.0


def test_the_real_siglip_trunk_is_recognised():
    """open_clip's ViT-B-16-SigLIP names timm's vit_base_patch16_siglip_224 (depth cut to 1 here: the structure,
    not the size, is what the check reads)."""
    import timm

    trunk = timm.create_model("vit_base_patch16_siglip_224", pretrained=False, num_classes=0, global_pool="map",
                              depth=1)
    visual = torch.nn.Module()
    visual.trunk = trunk
    assert is_siglip_visual(visual)
    trunk_cls = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, depth=1)
    visual.trunk = trunk_cls  # class token: not a SigLIP trunk
    assert not is_siglip_visual(visual)


def test_nothing_masked_is_the_plain_tower(siglip):
    images = torch.randn(3, 3, 32, 32)
    text = torch.randint(1, 1000, (3, 16))
    with torch.no_grad():
        glob, patches = encode_siglip_image(siglip.visual, images)
        tokens, pooled = encode_siglip_text(siglip, text)
        assert torch.equal(glob, siglip.encode_image(images))
        assert torch.equal(pooled, siglip.encode_text(text))
    assert patches.shape == (3, 16, 64) and tokens.shape == (3, 16, 64)


def test_masked_is_the_plain_tower_with_the_mask_token_in_place(siglip):
    torch.manual_seed(1)
    images, text = torch.randn(2, 3, 32, 32), torch.randint(1, 1000, (2, 16))
    pmask = torch.zeros(2, 16, dtype=torch.bool)
    pmask[0, [0, 5]] = True
    pmask[1, 15] = True
    tmask = torch.zeros(2, 16, dtype=torch.bool)
    tmask[0, 3] = tmask[1, [1, 2]] = True
    ptok, ttok = torch.randn(64), torch.randn(64)

    def replace(mask, token):
        return lambda module, args, out: torch.where(mask.unsqueeze(-1), token, out)

    with torch.no_grad():
        glob, _ = encode_siglip_image(siglip.visual, images, pmask, ptok)
        _, pooled = encode_siglip_text(siglip, text, tmask, ttok)
        h1 = siglip.visual.trunk.patch_embed.register_forward_hook(replace(pmask, ptok))
        h2 = siglip.text.token_embedding.register_forward_hook(replace(tmask, ttok))
        try:
            ref_img, ref_txt = siglip.encode_image(images), siglip.encode_text(text)
        finally:
            h1.remove()
            h2.remove()
        assert torch.allclose(glob, ref_img, atol=1e-6) and torch.allclose(pooled, ref_txt, atol=1e-6)
        plain = siglip.encode_image(images)
    assert not torch.allclose(glob[0], plain[0])  # the MAP head saw the mask token


def test_the_mask_tokens_get_gradients(siglip):
    ptok = torch.zeros(64, requires_grad=True)
    ttok = torch.zeros(64, requires_grad=True)
    mask = torch.zeros(2, 16, dtype=torch.bool)
    mask[:, 4] = True
    g, p = encode_siglip_image(siglip.visual, torch.randn(2, 3, 32, 32), mask, ptok)
    t, pooled = encode_siglip_text(siglip, torch.randint(1, 1000, (2, 16)), mask, ttok)
    (g.sum() + p.sum() + pooled.sum()).backward()
    assert ptok.grad.abs().sum() > 0 and ttok.grad.abs().sum() > 0


def test_clip_towers_are_refused(siglip):
    import open_clip

    clip = open_clip.create_model("macco-micro")
    assert not is_siglip_visual(clip.visual) and not is_siglip_text(clip)
    with pytest.raises(ValueError, match="timm ViT trunk"):
        encode_siglip_image(clip.visual, torch.randn(1, 3, 32, 32))
    with pytest.raises(ValueError, match="bidirectional TextTransformer"):
        encode_siglip_text(clip, torch.randint(1, 100, (1, 77)))
    import timm

    from model.masked import encode_image_tokens, encode_text_tokens

    images, text = torch.randn(1, 3, 32, 32), torch.randint(1, 1000, (1, 16))
    with torch.no_grad():  # the generic entry points send SigLIP towers to model.siglip
        assert torch.equal(encode_image_tokens(siglip.visual, images)[0], siglip.encode_image(images))
        assert torch.equal(encode_text_tokens(siglip, text)[1], siglip.encode_text(text))
    other = torch.nn.Module()
    other.trunk = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, depth=1)
    with pytest.raises(ValueError, match="class-token pooling"):  # a timm trunk with a class token: neither
        encode_image_tokens(other, torch.randn(1, 3, 224, 224))


# ---- the sigmoid form of MCA and MIR --------------------------------------------------------------------------
def _unit(*shape):
    return torch.nn.functional.normalize(torch.randn(*shape), dim=-1)


def test_sigmoid_contrast_with_one_stack_each_is_open_clips_siglip_loss():
    from open_clip.loss import SigLipLoss

    from model.losses import sigmoid_contrast_loss

    torch.manual_seed(0)
    I, T = _unit(6, 8), _unit(6, 8)
    scale, bias = torch.tensor(10.0), torch.tensor(-10.0)
    ours = sigmoid_contrast_loss([I], [T], scale, bias)
    assert torch.allclose(ours, SigLipLoss()(I, T, scale, bias), atol=1e-6)


def test_sigmoid_mca_by_hand():
    """One sample, 1-d features: I = 1, I_m = -1, T = T_m = 1, s = 1, b = 0. Pairs: (I, T) positive, logit 1;
    (I, T_m) negative, logit 1; (I_m, T) and (I_m, T_m) negative, logit -1."""
    import math

    from model.losses import sigmoid_contrast_loss

    one = torch.ones(1, 1)
    got = sigmoid_contrast_loss([one, -one], [one, one], torch.tensor(1.0), torch.tensor(0.0))
    want = 3 * math.log1p(math.exp(-1)) + math.log1p(math.exp(1))
    assert got.item() == pytest.approx(want, abs=1e-6)


def test_sigmoid_mca_and_mir_match_the_pairwise_reference_with_gradients():
    from model.losses import sigmoid_contrast_loss, sigmoid_intra_modal_loss
    from reference_losses import sigmoid_pairs_reference

    torch.manual_seed(3)
    B = 4
    I, Im, T, Tm, H = (_unit(B, 5).requires_grad_() for _ in range(5))
    scale, bias = 7.0, -3.0
    got = sigmoid_contrast_loss([I, Im], [T, Tm], torch.tensor(scale), torch.tensor(bias), hard_texts=H)
    want = sigmoid_pairs_reference([*I, *Im], [*T, *Tm, *H], lambda i, j: i == j and i < B, scale, bias, B)
    assert torch.allclose(got, want, atol=1e-5)
    g = torch.autograd.grad(got, [I, Im, T, Tm, H])
    w = torch.autograd.grad(want, [I, Im, T, Tm, H])
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g, w))
    mir = sigmoid_intra_modal_loss(T, Tm, torch.tensor(scale), torch.tensor(bias))
    ref = sigmoid_pairs_reference(list(Tm), list(T), lambda i, j: i == j, scale, bias, B)
    assert torch.allclose(mir, ref, atol=1e-5)
    # a masked sample is a negative for its own full partner: pulling I_m toward T raises the loss
    toward = torch.nn.functional.normalize(Im + T, dim=-1).detach()
    closer = sigmoid_contrast_loss([I, toward], [T, Tm], torch.tensor(scale), torch.tensor(bias))
    assert closer > sigmoid_contrast_loss([I, Im], [T, Tm], torch.tensor(scale), torch.tensor(bias))


# ---- the training task on SigLIP towers ------------------------------------------------------------------------
def _siglip_batch():
    torch.manual_seed(5)
    images, texts = torch.randn(3, 3, 32, 32), torch.randint(3, 1000, (3, 16))
    tm = torch.zeros(3, 16, dtype=torch.bool)
    tm[0, [1, 2]] = tm[1, 4] = True
    im = torch.zeros(3, 16, dtype=torch.bool)
    im[0, :3] = im[2, 7] = True
    return images, texts, tm, im


@pytest.mark.parametrize("mode,mca,mir", [("macco", True, True), ("clip-ft", True, True), ("text-only", True, True),
                                          ("image-only", True, True), ("macco", False, True), ("macco", True, False)])
def test_macco_task_on_siglip_uses_the_sigmoid_terms(siglip, mode, mca, mir):
    """MaccoTask on macco-siglip-tiny: the contrastive and MIR terms are the sigmoid ones on the towers' own
    (masked) globals, the reconstruction terms are there by mode, and every trainable part gets a gradient."""
    from model.losses import LossWeights, sigmoid_contrast_loss, sigmoid_intra_modal_loss
    from model.masked import encode_image_tokens, encode_text_tokens
    from model.task import MaccoConfig, MaccoTask

    task = MaccoTask(siglip, MaccoConfig(mode=mode, mca=mca, mir=mir))
    assert task.sigmoid and task.grid == 4 and task.patch_size == 8
    images, texts, tm, im = _siglip_batch()
    out = task.terms(images, texts, tm, im)
    scale, bias = siglip.logit_scale.exp(), siglip.logit_bias
    norm = torch.nn.functional.normalize
    I, T = norm(encode_image_tokens(siglip.visual, images)[0], dim=-1), norm(encode_text_tokens(siglip, texts)[1], dim=-1)
    imgs, txts, intra = [I], [T], []
    if task.cfg.masks_text:
        T_m = norm(encode_text_tokens(siglip, texts, tm, task.text_mask_token)[1], dim=-1)
        txts += [T_m] if mca else []
        intra += [sigmoid_intra_modal_loss(T, T_m, scale, bias)] if mir else []
    if task.cfg.masks_image:
        I_m = norm(encode_image_tokens(siglip.visual, images, im, task.img_mask_token)[0], dim=-1)
        imgs += [I_m] if mca else []
        intra += [sigmoid_intra_modal_loss(I, I_m, scale, bias)] if mir else []
    assert torch.allclose(out["contrast_loss"], sigmoid_contrast_loss(imgs, txts, scale, bias), atol=1e-5)
    if intra:
        assert torch.allclose(out["intra_modal_contrast_loss"], sum(intra) / len(intra), atol=1e-5)
    else:
        assert "intra_modal_contrast_loss" not in out
    assert ("text_reconstruction_loss" in out) == task.cfg.masks_text
    assert ("image_reconstruction_loss" in out) == task.cfg.masks_image
    task.zero_grad()
    out["total_loss"].backward()
    assert siglip.logit_bias.grad is not None and siglip.text.token_embedding.weight.grad.abs().sum() > 0
    if task.cfg.masks_text:
        assert task.text_mask_token.grad.abs().sum() > 0
    if task.cfg.masks_image:
        assert task.img_mask_token.grad.abs().sum() > 0
    siglip.zero_grad()
