"""Masked encoding for open_clip's SigLIP towers, through the towers' own layers (#18, item 1).

SigLIP differs from the OpenAI-style CLIP towers (``model.masked``) on every axis masking touches:
- image: a timm ``VisionTransformer`` trunk (``visual.trunk``) with no class token and an attention-pool (MAP)
  head. Patch embedding -> (masked patches replaced by the image mask token) -> + positional embedding ->
  patch dropout -> norm_pre -> blocks -> norm gives the patch tokens; the global feature is the trunk's own head
  (``forward_head``: the MAP pool over every patch token, fc_norm) and the open_clip projection ``visual.head``.
  The patch tokens go through the same projection, so they live where the global feature does.
- text: ``clip.text``, a non-causal ``TextTransformer`` pooled at a fixed position (``pool_type`` last: the
  padded sequence's last slot). Token embedding -> (masked positions replaced by the text mask token) -> +
  positional embedding -> the bidirectional transformer (with the tower's own padding mask, if it uses one) ->
  ln_final -> pooled; the projection applied to the pooled feature and to every token.
With nothing masked both return exactly what ``clip.encode_image`` / ``clip.encode_text`` return (tested).
Without a causal mask every position sees every other: a masked copy cannot be trimmed after its last masked
position, as the CLIP text path does.

``macco-siglip-tiny`` and ``macco-siglip-demo`` (``model/configs``): SigLIP-shaped models small enough for a
CPU — the timm trunks registered here (``TRUNKS``: no class token, MAP head), a bidirectional text tower pooled
at the last position, the sigmoid loss bias (``init_logit_bias``).
"""
from __future__ import annotations

import torch
from torch import nn

# the repo's SigLIP-shaped timm trunks (model/configs): no class token, a MAP head, as SigLIP's
#   macco_siglip_vit_tiny: 32 px, 8 px patches, width 64, 2 blocks (macco-siglip-tiny: the tests)
#   macco_siglip_vit_demo: 64 px, 8 px patches, width 128, 3 blocks of 4 heads (macco-siglip-demo: the
#   synthetic world's SigLIP demo, the size of macco-tiny's image tower)
TRUNKS = {"macco_siglip_vit_tiny": dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=2),
          "macco_siglip_vit_demo": dict(img_size=64, patch_size=8, embed_dim=128, depth=3, num_heads=4)}
_registered = False


def register_tiny_timm() -> None:
    """Register the repo's SigLIP-shaped timm trunks (``TRUNKS``) once."""
    global _registered
    if _registered:
        return
    from timm.models import register_model
    from timm.models.vision_transformer import VisionTransformer

    def make(name: str, args: dict):
        def build(pretrained: bool = False, **kwargs) -> VisionTransformer:
            if pretrained:
                raise ValueError(f"{name} has no pretrained weights (a repo architecture)")
            for k in ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir"):  # the factory's, not the model's
                kwargs.pop(k, None)
            return VisionTransformer(**{**args, "class_token": False, "global_pool": "map", **kwargs})

        build.__name__ = name
        return build

    for name, args in TRUNKS.items():
        register_model(make(name, args))
    _registered = True


def is_siglip_visual(visual: nn.Module) -> bool:
    """An open_clip ``TimmModel`` whose trunk is a timm ViT without prefix tokens (SigLIP's: pooled by MAP)."""
    trunk = getattr(visual, "trunk", None)
    return trunk is not None and hasattr(trunk, "patch_embed") and getattr(trunk, "num_prefix_tokens", 1) == 0


def is_siglip_text(clip: nn.Module) -> bool:
    """A ``CustomTextCLIP`` whose text tower is open_clip's bidirectional ``TextTransformer`` (no class token)."""
    text = getattr(clip, "text", None)
    return (text is not None and hasattr(text, "token_embedding") and getattr(text, "attn_mask", 0) is None
            and getattr(text, "cls_emb", None) is None)


def _put(x: torch.Tensor, mask: torch.Tensor | None, token: torch.Tensor | None) -> torch.Tensor:
    return x if mask is None else torch.where(mask.unsqueeze(-1), token.to(x.dtype), x)


def siglip_patch_embed(visual: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """The trunk's patch embeddings [B, N, W] (before positions)."""
    if not is_siglip_visual(visual):
        raise ValueError("SigLIP masked image encoding needs a timm ViT trunk without class or register tokens")
    trunk = visual.trunk
    if getattr(trunk, "dynamic_img_size", False):
        raise ValueError("SigLIP masked image encoding: dynamic_img_size trunks are not supported")
    return trunk.patch_embed(images)


def siglip_image_from_embeddings(visual: nn.Module, x: torch.Tensor, mask: torch.Tensor | None = None,
                                 mask_token: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(global [B, E], patch tokens [B, N, E]) from patch embeddings [B, N, W]; ``mask`` [B, N] True = masked."""
    trunk = visual.trunk
    x = trunk.norm_pre(trunk.patch_drop(trunk._pos_embed(_put(x, mask, mask_token))))
    x = trunk.norm(trunk.blocks(x))
    return visual.head(trunk.forward_head(x)), visual.head(x)


def encode_siglip_image(visual: nn.Module, images: torch.Tensor, mask: torch.Tensor | None = None,
                        mask_token: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(global feature [B, E] from the MAP head, patch features [B, N, E]), unnormalised."""
    return siglip_image_from_embeddings(visual, siglip_patch_embed(visual, images), mask, mask_token)


def encode_siglip_text(clip: nn.Module, text: torch.Tensor, mask: torch.Tensor | None = None,
                       mask_token: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(token features [B, L, E], pooled feature [B, E]), unnormalised; ``mask`` [B, L] True = masked."""
    from open_clip.transformer import text_global_pool

    if not is_siglip_text(clip):
        raise ValueError("SigLIP masked text encoding needs open_clip's bidirectional TextTransformer (no cls_emb)")
    t = clip.text
    L = text.shape[1]
    cast = t.transformer.get_cast_dtype()
    x = _put(t.token_embedding(text).to(cast), mask, mask_token)
    attn_mask = t._build_additive_mask(text, L, x.dtype) if getattr(t, "use_pad_mask", False) else None
    x = t.transformer(x + t.positional_embedding[:L].to(cast), attn_mask=attn_mask)
    x = t.ln_final(x)
    pooled = text_global_pool(x, text, t.pool_type, eos_token_id=getattr(t, "eos_id", None))
    proj = t.text_projection
    if proj is not None:
        x, pooled = (proj(x), proj(pooled)) if isinstance(proj, nn.Linear) else (x @ proj, pooled @ proj)
    return x, pooled


def is_siglip(clip: nn.Module) -> bool:
    """Both towers SigLIP's (the sigmoid objective and ``model.siglip``'s masked encoding apply)."""
    return is_siglip_visual(clip.visual) and is_siglip_text(clip)


def siglip_pair_image(visual: nn.Module, images: torch.Tensor, mask: torch.Tensor, mask_token: torch.Tensor
                      ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """((full global, full patches), (masked global, masked patches)): both copies through the trunk as one 2B
    batch, the patch embedding computed once."""
    x = siglip_patch_embed(visual, images)
    B = x.shape[0]
    glob, tokens = siglip_image_from_embeddings(visual, torch.cat([x, _put(x, mask, mask_token)]))
    return (glob[:B], tokens[:B]), (glob[B:], tokens[B:])
