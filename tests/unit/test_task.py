"""model/task.py: ``MaccoTask``'s step equals the plain reference computation (terms, gradients, stop-gradient
map), every mode and ablation flag, CLIP-FT as the plain CLIP loss."""
import open_clip
import pytest
import torch

from model.losses import contrast_loss
from model.masked import encode_image_tokens, encode_text_tokens
from model.task import MaccoConfig, MaccoTask
from reference_losses import reference_terms, text_log_probs
from tests_support import micro_batch as batch, micro_clip as clip  # noqa: F401 (fixtures)


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
