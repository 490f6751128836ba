"""Masked encoding through the CLIP towers' own layers (no monkey-patching), full and masked copies together.

Text: token embedding -> (masked positions replaced by the text mask token) -> + positional embedding ->
the causal transformer -> ln_final -> text projection at *every* position. The global feature is the EOT
token (``argmax`` of the ids, the same position in both copies).
Image: conv1 patches -> CLS prepended -> (masked patches replaced by the image mask token; CLS never) ->
+ positional embedding -> ln_pre -> transformer -> ln_post and proj on *all* tokens (the reference projects the
patch tokens too). Masks are boolean with True = masked; image masks have no CLS slot.
With nothing masked both functions return exactly what ``clip.encode_text`` / ``clip.encode_image`` return.
Pairs for training: the image copies run as one 2B batch sharing the patch embedding (``encode_image_pair``);
the masked text copy is encoded only up to the last position read from it (``encode_text_pair``).
"""
from __future__ import annotations

import torch
from torch import nn


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
    m = mask.to(x.dtype).unsqueeze(-1)
    return x * (1 - m) + mask_token.to(x.dtype) * m


def _encode_embedded_text(clip: nn.Module, x: torch.Tensor, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    L = text.shape[1]  # the context length, or fewer positions for a batch trimmed after its last EOT
    cast = clip.transformer.get_cast_dtype()
    attn_mask = clip.attn_mask[:L, :L] if clip.attn_mask is not None else None
    x = x + clip.positional_embedding[:L].to(cast)
    x = clip.transformer(x, attn_mask=attn_mask)
    x = clip.ln_final(x)
    proj = clip.text_projection
    if proj is not None:
        x = proj(x) if isinstance(proj, nn.Linear) else x @ proj  # [B, L, E]
    eot = x[torch.arange(x.shape[0], device=x.device), text.argmax(dim=-1)]
    return x, eot


def encode_text_tokens(clip: nn.Module, text: torch.Tensor, mask: torch.Tensor | None = None,
                       mask_token: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(all-token features [B, L, E], global EOT feature [B, E]), unnormalised."""
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
                     masked_length: int) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """((full tokens [B, L, E], full EOT), (masked tokens [B, masked_length, E], masked EOT)).

    The full copy keeps every position: the image predictor attends to all of them, padding included, as the
    reference. The masked copy is read only at its masked positions and its EOT, so it is encoded on its first
    ``masked_length`` positions (the caller's max over the batch of the EOT and the last masked position, + 1):
    under the causal mask nothing there depends on a later position, so the features are the ones the
    full-length pass gives (captions are ~15 of 77 tokens).
    """
    _check_text(clip)
    x = _embed_text(clip, text)  # once for both copies (one dense embedding gradient, not two)
    n = masked_length
    return (_encode_embedded_text(clip, x, text),
            _encode_embedded_text(clip, _put_mask_token(x[:, :n], mask[:, :n], mask_token), text[:, :n]))


def _patch_embed(visual: nn.Module, images: torch.Tensor) -> torch.Tensor:
    _check_vision(visual)
    x = visual.conv1(images)  # [B, W, g, g]
    return x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)  # [B, N, W]


def _encode_patches(visual: nn.Module, x: torch.Tensor, mask: torch.Tensor | None,
                    mask_token: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    cls = visual.class_embedding.to(x.dtype).expand(x.shape[0], 1, -1)
    if mask is not None:
        x = _put_mask_token(x, mask, mask_token)
    x = torch.cat([cls, x], dim=1)  # [B, 1 + N, W]
    x = x + visual.positional_embedding.to(x.dtype)
    x = visual.patch_dropout(x)
    x = visual.ln_pre(x)
    x = visual.transformer(x)
    x = visual.ln_post(x)
    if visual.proj is not None:
        x = x @ visual.proj
    return x[:, 0], x[:, 1:]


def encode_image_tokens(visual: nn.Module, images: torch.Tensor, mask: torch.Tensor | None = None,
                        mask_token: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(CLS feature [B, E], patch features [B, N, E]), both after ln_post and proj, unnormalised."""
    return _encode_patches(visual, _patch_embed(visual, images), mask, mask_token)


def encode_image_pair(visual: nn.Module, images: torch.Tensor, mask: torch.Tensor, mask_token: torch.Tensor
                      ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """((full CLS, full patches), (masked CLS, masked patches)): both copies through the transformer as one
    2B batch; the patch embedding, the same for both before the mask token goes in, is computed once."""
    x = _patch_embed(visual, images)
    B = x.shape[0]
    cls, patches = _encode_patches(visual, torch.cat([x, x]), torch.cat([torch.zeros_like(mask), mask]), mask_token)
    return (cls[:B], patches[:B]), (cls[B:], patches[B:])
