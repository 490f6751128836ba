"""model/masked.py: the masked encoders (trimmed text, masked copies, training pairs, last blocks cut to the
query slots) equal the plain towers' computation, in value and gradient."""
import open_clip
import pytest
import torch

from model.masked import (encode_image_pair, encode_image_tokens, encode_text_pair, encode_text_tokens,
                          encode_text_trimmed, plain_last_block, supports_trimmed_text)
from model.slots import query_slots
from model.task import MaccoTask
from tests_support import micro_batch as batch, micro_clip as clip  # noqa: F401 (fixtures)


@pytest.fixture(scope="module")
def clip3():
    """macco-micro with 3 blocks per tower: blocks run before the cut last one."""
    import json

    from model.factory import CONFIG_DIR

    cfg = json.loads((CONFIG_DIR / "macco-micro.json").read_text())
    cfg["vision_cfg"]["layers"] = cfg["text_cfg"]["layers"] = 3
    torch.manual_seed(0)
    return open_clip.CLIP(**cfg)


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
