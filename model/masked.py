"""Masked encoding through the CLIP towers' own layers (no monkey-patching), full and masked copies together.

Text: token embedding -> (masked positions replaced by the text mask token) -> + positional embedding ->
the causal transformer -> ln_final -> text projection at *every* position. The global feature is the EOT
token (``argmax`` of the ids, the same position in both copies).
Image: conv1 patches -> CLS prepended -> (masked patches replaced by the image mask token; CLS never) ->
+ positional embedding -> ln_pre -> transformer -> ln_post and proj on *all* tokens (the reference projects the
patch tokens too). Masks are boolean with True = masked; image masks have no CLS slot.
With nothing masked both functions return exactly what ``clip.encode_text`` / ``clip.encode_image`` return.
SigLIP towers (a timm trunk pooled by MAP, a bidirectional text tower) go to ``model.siglip`` from the same four
entry points; the masked SigLIP text copy runs at full length (no causal mask: nothing can be trimmed).
Pairs for training: the image copies run as one 2B batch sharing the patch embedding (``encode_image_pair``);
the masked text copy is encoded only up to the last position read from it (``encode_text_pair``); and each masked
copy's last block can be run only at the tokens the step reads from it: its CLS/EOT and the masked positions the
predictors query (``_block_at``).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .siglip import encode_siglip_image, encode_siglip_text, is_siglip_text, is_siglip_visual, siglip_pair_image
from .slots import take


def tower_shapes(clip: nn.Module) -> dict[str, int]:
    """What the training parts are sized by: the text token width, vocabulary and context, the patch-embedding width,
    the patch grid and size, and the joint embedding width — for CLIP and SigLIP towers alike."""
    visual = clip.visual
    if is_siglip_visual(visual):
        pe = visual.trunk.patch_embed
        image_width, grid, patch = pe.proj.out_channels, pe.grid_size[0], pe.patch_size[0]
    else:
        image_width = visual.conv1.out_channels
        grid = visual.grid_size[0] if isinstance(visual.grid_size, (tuple, list)) else visual.grid_size
        patch = visual.patch_size[0] if isinstance(visual.patch_size, (tuple, list)) else visual.patch_size
    text = clip.text if is_siglip_text(clip) else clip
    proj = text.text_projection
    embed = proj.out_features if isinstance(proj, nn.Linear) else proj.shape[1]
    return {"text_width": text.token_embedding.embedding_dim, "vocab": text.token_embedding.num_embeddings,
            "context": text.positional_embedding.shape[0], "image_width": image_width, "grid": grid, "patch": patch,
            "embed": embed}


def _check_vision(visual: nn.Module) -> None:
    if getattr(visual, "attn_pool", None) is not None or getattr(visual, "final_ln_after_pool", False) \
            or getattr(visual, "pool_type", "tok") != "tok" or not hasattr(visual, "conv1"):
        raise ValueError("masked image encoding supports the standard CLIP ViT tower (class-token pooling)")


def _check_text(clip: nn.Module) -> None:
    if getattr(clip, "text_pool_type", "argmax") != "argmax":
        raise ValueError("masked text encoding supports CLIP's argmax (EOT) text pooling")


def _embed_text(clip: nn.Module, text: torch.Tensor) -> torch.Tensor:
    return clip.token_embedding(text).to(clip.transformer.get_cast_dtype())  # [B, L, D]


def _put_mask_token(x: torch.Tensor, mask: torch.Tensor, mask_token: torch.Tensor) -> torch.Tensor:
    return torch.where(mask.unsqueeze(-1), mask_token.to(x.dtype), x)


def _text_out(clip: nn.Module, x: torch.Tensor) -> torch.Tensor:
    x = clip.ln_final(x)
    proj = clip.text_projection
    if proj is not None:
        x = proj(x) if isinstance(proj, nn.Linear) else x @ proj  # [B, L, E]
    return x


def _encode_embedded_text(clip: nn.Module, x: torch.Tensor, text: torch.Tensor,
                          queries: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(token features, EOT feature). With ``queries`` [B, M] (positions): the features there only, [B, M, E],
    the last block run only at them and the EOT (``plain_last_block``; otherwise the full output is gathered)."""
    L = text.shape[1]  # the context length, or fewer positions for a batch trimmed after its last EOT
    cast = clip.transformer.get_cast_dtype()
    attn_mask = clip.attn_mask[:L, :L] if clip.attn_mask is not None else None
    x = x + clip.positional_embedding[:L].to(cast)
    eot = text.argmax(dim=-1)
    if queries is not None and plain_last_block(clip.transformer):
        t = clip.transformer
        x = _run_blocks(t, x, t.resblocks[:-1], attn_mask)
        slots = torch.cat([eot.unsqueeze(1), queries], dim=1)  # the EOT first, as the image's CLS
        x = _text_out(clip, _block_at(t.resblocks[-1], x, slots, attn_mask))
        return x[:, 1:], x[:, 0]
    x = _text_out(clip, clip.transformer(x, attn_mask=attn_mask))
    glob = x[torch.arange(x.shape[0], device=x.device), eot]
    return (take(x, queries) if queries is not None else x), glob


def encode_text_tokens(clip: nn.Module, text: torch.Tensor, mask: torch.Tensor | None = None,
                       mask_token: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(all-token features [B, L, E], global EOT feature [B, E]), unnormalised."""
    if is_siglip_text(clip):
        return encode_siglip_text(clip, text, mask, mask_token)
    _check_text(clip)
    x = _embed_text(clip, text)
    if mask is not None:
        x = _put_mask_token(x, mask, mask_token)
    return _encode_embedded_text(clip, x, text)


def supports_trimmed_text(clip: nn.Module) -> bool:
    """True for an open_clip ``CLIP`` whose text tower is causal with EOT (argmax) pooling."""
    return (getattr(clip, "text_pool_type", None) == "argmax" and getattr(clip, "attn_mask", None) is not None
            and hasattr(clip, "token_embedding") and hasattr(clip, "positional_embedding"))


def encode_text_trimmed(clip: nn.Module, text: torch.Tensor) -> torch.Tensor:
    """``clip.encode_text(text)`` computed on the first L positions only, L = the batch's last EOT + 1.

    Under the causal mask no position attends to a later one, so the EOT feature does not depend on the
    padding after it: dropping the padding columns changes nothing but the cost (captions are ~15 of 77
    tokens).
    """
    if not supports_trimmed_text(clip):
        raise ValueError("trimmed text encoding needs a causal CLIP text tower with argmax pooling")
    return encode_text_tokens(clip, text[:, :int(text.argmax(dim=-1).max()) + 1])[1]


def encode_text_pair(clip: nn.Module, text: torch.Tensor, mask: torch.Tensor, mask_token: torch.Tensor,
                     masked_length: int, queries: torch.Tensor | None = None
                     ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """((full tokens [B, L, E], full EOT), (masked tokens [B, masked_length, E], masked EOT)).

    The full copy keeps every position: the image predictor attends to all of them, padding included, as the
    reference. The masked copy is read only at its masked positions and its EOT, so it is encoded on its first
    ``masked_length`` positions (the caller's max over the batch of the EOT and the last masked position, + 1):
    under the causal mask nothing there depends on a later position, so the features are the ones the
    full-length pass gives (captions are ~15 of 77 tokens). ``queries`` [B, M] (positions, e.g.
    ``model.slots.query_slots`` of the mask): the masked copy's tokens come back only there, [B, M, E], and its
    last block runs only at them and its EOT. SigLIP: both copies at full length (``masked_length`` unused).
    """
    if is_siglip_text(clip):
        full, (tokens, glob) = encode_siglip_text(clip, text), encode_siglip_text(clip, text, mask, mask_token)
        return full, (take(tokens, queries) if queries is not None else tokens, glob)
    _check_text(clip)
    x = _embed_text(clip, text)  # once for both copies (one dense embedding gradient, not two)
    n = masked_length
    return (_encode_embedded_text(clip, x, text),
            _encode_embedded_text(clip, _put_mask_token(x[:, :n], mask[:, :n], mask_token), text[:, :n], queries))


def _patch_embed(visual: nn.Module, images: torch.Tensor) -> torch.Tensor:
    _check_vision(visual)
    x = visual.conv1(images)  # [B, W, g, g]
    return x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)  # [B, N, W]


def _tokens_in(visual: nn.Module, x: torch.Tensor, mask: torch.Tensor | None,
               mask_token: torch.Tensor | None) -> torch.Tensor:
    """Patch embeddings [B, N, W] -> the transformer's input [B, 1 + N, W] (mask token, CLS, positions, ln_pre)."""
    cls = visual.class_embedding.to(x.dtype).expand(x.shape[0], 1, -1)
    if mask is not None:
        x = _put_mask_token(x, mask, mask_token)
    x = torch.cat([cls, x], dim=1)  # [B, 1 + N, W]
    x = x + visual.positional_embedding.to(x.dtype)
    x = visual.patch_dropout(x)
    return visual.ln_pre(x)


def _tokens_out(visual: nn.Module, x: torch.Tensor) -> torch.Tensor:
    x = visual.ln_post(x)
    return x @ visual.proj if visual.proj is not None else x


def _encode_patches(visual: nn.Module, x: torch.Tensor, mask: torch.Tensor | None,
                    mask_token: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    x = _tokens_out(visual, visual.transformer(_tokens_in(visual, x, mask, mask_token)))
    return x[:, 0], x[:, 1:]


def encode_image_tokens(visual: nn.Module, images: torch.Tensor, mask: torch.Tensor | None = None,
                        mask_token: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(CLS feature [B, E], patch features [B, N, E]), both after ln_post and proj, unnormalised (SigLIP: the MAP
    global and the patch tokens)."""
    if is_siglip_visual(visual):
        return encode_siglip_image(visual, images, mask, mask_token)
    return _encode_patches(visual, _patch_embed(visual, images), mask, mask_token)


def plain_last_block(transformer: nn.Module) -> bool:
    """True when the tower's last block can be run at a subset of its tokens (``_block_at``): open_clip's standard
    batch-first ``ResidualAttentionBlock`` (self-attention)."""
    from open_clip.transformer import ResidualAttentionBlock  # here: importing open_clip costs seconds

    blocks = getattr(transformer, "resblocks", None)
    return (blocks is not None and len(blocks) > 0 and type(blocks[-1]) is ResidualAttentionBlock
            and not hasattr(blocks[-1], "ln_1_kv") and getattr(transformer, "batch_first", False))


def _run_blocks(transformer: nn.Module, x: torch.Tensor, blocks, attn_mask: torch.Tensor | None = None
                ) -> torch.Tensor:
    """``transformer.forward``'s loop (batch-first) over ``blocks``, gradient checkpointing honoured."""
    for blk in blocks:
        if transformer.grad_checkpointing:
            x = checkpoint(blk, x, None, None, attn_mask, use_reentrant=False)
        else:
            x = blk(x, attn_mask=attn_mask)
    return x


def _block_at(blk: nn.Module, x: torch.Tensor, idx: torch.Tensor, attn_mask: torch.Tensor | None = None
              ) -> torch.Tensor:
    """``blk(x, attn_mask=attn_mask)`` at the token positions idx [B, M] only, with the block's own layers: every
    token is a key and a value, only the selected ones are queries (with their rows of the mask) and go through
    the MLP. A token's output depends on the others only through its attention, so the values are the ones the
    full block gives at those positions."""
    kv = blk.ln_1(x)
    if attn_mask is not None:  # the rows of the selected queries, one [M, L] mask per sample and head
        attn_mask = attn_mask.to(x.dtype)[idx].repeat_interleave(blk.attn.num_heads, dim=0)
    y = take(x, idx) + blk.ls_1(blk.attn(take(kv, idx), kv, kv, need_weights=False, attn_mask=attn_mask)[0])
    return y + blk.ls_2(blk.mlp(blk.ln_2(y)))


def encode_image_pair(visual: nn.Module, images: torch.Tensor, mask: torch.Tensor, mask_token: torch.Tensor,
                      queries: torch.Tensor | None = None
                      ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """((full CLS, full patches), (masked CLS, masked patches)): both copies through the transformer as one
    2B batch; the patch embedding, the same for both before the mask token goes in, is computed once.

    ``queries`` [B, M] (patch indices, e.g. ``model.slots.query_slots`` of the mask): the masked copy's patches are
    returned only there, [B, M, E], and its last block runs only at its CLS and those patches (every token still
    a key and value; needs ``plain_last_block`` and no patch dropout, else the full output is gathered). The
    training step reads nothing else of the masked copy.
    """
    if is_siglip_visual(visual):
        full, (glob, patches) = siglip_pair_image(visual, images, mask, mask_token)
        return full, (glob, take(patches, queries) if queries is not None else patches)
    x = _patch_embed(visual, images)
    B = x.shape[0]
    h = _tokens_in(visual, torch.cat([x, _put_mask_token(x, mask, mask_token)]), None, None)
    if queries is None or not (plain_last_block(visual.transformer)
                               and isinstance(visual.patch_dropout, nn.Identity)):  # dropout moves tokens
        out = _tokens_out(visual, visual.transformer(h))
        full, masked = out[:B], out[B:]
        patches = masked[:, 1:] if queries is None else take(masked[:, 1:], queries)
        return (full[:, 0], full[:, 1:]), (masked[:, 0], patches)
    t = visual.transformer
    h = _run_blocks(t, h, t.resblocks[:-1])
    last = t.resblocks[-1]
    full = _tokens_out(visual, _run_blocks(t, h[:B], [last]))
    cls_and_queries = torch.cat([queries.new_zeros(B, 1), queries + 1], dim=1)
    masked = _tokens_out(visual, _block_at(last, h[B:], cls_and_queries))
    return (full[:, 0], full[:, 1:]), (masked[:, 0], masked[:, 1:])
