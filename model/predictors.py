"""Training-only predictors: masked-text (vocabulary head) and masked-image (pixel head) reconstruction.

Both work in the joint embedding space (width E = the CLIP embed dim), apply the global-to-local injection
(every token of a stream averaged with that stream's global feature) to query and key/value streams, then
pre-norm cross-attention blocks with separate LayerNorms for query and key/value (no attention masks, as in
the reference). Initialisation follows the reference (its CLIP-style init of the attention blocks, Xavier heads).
Each predictor has one entry point, ``predict``: the outputs at the masked positions only, in the order of
``x[positions]``. Without self-attention layers it computes only those queries (``slots``: the masked copy can
then be encoded at them only); with them, every position. The plain all-position computation the tests compare
it with is ``tests/reference_losses.py``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .slots import Slots, query_slots, take


class CrossAttentionBlock(nn.Module):
    """x <- x + MHA(LN_q(x), LN_kv(y)); x <- x + MLP(LN(x)). ``cross=False``: a self-attention block (x attends to
    LN_q(x); no LN_kv, as the reference's plain residual attention blocks: an unused parameter would also fail
    DDP's ``find_unused_parameters=False``)."""

    def __init__(self, width: int, heads: int, mlp_ratio: float = 4.0, cross: bool = True):
        super().__init__()
        self.ln_q = nn.LayerNorm(width)
        self.ln_kv = nn.LayerNorm(width) if cross else None
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(width)
        hidden = int(width * mlp_ratio)
        self.mlp = nn.Sequential()
        self.mlp.add_module("c_fc", nn.Linear(width, hidden))
        self.mlp.add_module("gelu", nn.GELU())
        self.mlp.add_module("c_proj", nn.Linear(hidden, width))

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        q = self.ln_q(x)
        if (y is None) != (self.ln_kv is None):
            raise ValueError("a cross-attention block needs y; a self-attention block takes none")
        kv = q if y is None else self.ln_kv(y)
        x = x + self.attend(q, kv)
        return x + self.mlp(self.ln_2(x))

    def attend(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        """``self.attn(q, kv, kv, need_weights=False)[0]`` (no masks, no dropout) with the module's own weights,
        computed batch-first: one projection each for q, k and v (views of the packed in-projection; a joint k/v
        projection costs a permuted copy each way), then scaled_dot_product_attention on [B, heads, L, d]
        (nn.MultiheadAttention goes through sequence-first copies on the way)."""
        a = self.attn
        B, Lq, E = q.shape
        h = a.num_heads
        w, b = a.in_proj_weight.chunk(3), (a.in_proj_bias.chunk(3) if a.in_proj_bias is not None else (None,) * 3)

        def heads(x: torch.Tensor, i: int) -> torch.Tensor:
            return F.linear(x, w[i], b[i]).view(B, x.shape[1], h, E // h).transpose(1, 2)

        o = F.scaled_dot_product_attention(heads(q, 0), heads(kv, 1), heads(kv, 2)).transpose(1, 2).reshape(B, Lq, E)
        return a.out_proj(o)

    def init_reference(self, n_layers: int) -> None:
        w = self.attn.embed_dim
        nn.init.normal_(self.attn.in_proj_weight, std=w ** -0.5)
        nn.init.normal_(self.attn.out_proj.weight, std=w ** -0.5 * (2 * n_layers) ** -0.5)
        nn.init.normal_(self.mlp.c_fc.weight, std=(2 * w) ** -0.5)
        nn.init.normal_(self.mlp.c_proj.weight, std=w ** -0.5 * (2 * n_layers) ** -0.5)


def inject_global(tokens: torch.Tensor, global_feat: torch.Tensor) -> torch.Tensor:
    """Global-to-local injection: t_j <- (t_j + t_global) / 2."""
    return (tokens + global_feat.unsqueeze(1)) / 2


def sincos_2d(embed_dim: int, grid: int) -> torch.Tensor:
    """Fixed 2-D sin-cos positions [grid*grid, D] (MAE's construction: half the channels per axis)."""
    if embed_dim % 4:
        raise ValueError(f"embed_dim {embed_dim} must be a multiple of 4 for 2-D sin-cos positions")
    gh, gw = torch.meshgrid(torch.arange(grid, dtype=torch.float64), torch.arange(grid, dtype=torch.float64),
                            indexing="ij")

    def one(pos: torch.Tensor, d: int) -> torch.Tensor:
        omega = 1.0 / 10000 ** (torch.arange(d // 2, dtype=torch.float64) / (d / 2.0))
        out = pos.reshape(-1, 1) * omega.reshape(1, -1)
        return torch.cat([out.sin(), out.cos()], dim=1)

    # MAE: grid = meshgrid(w, h) so the first half encodes w, the second h
    return torch.cat([one(gw, embed_dim // 2), one(gh, embed_dim // 2)], dim=1).float()


class _Predictor(nn.Module):
    """The block stack both predictors share: optional self-attention blocks, cross-attention blocks, a LayerNorm,
    with the reference's initialisation (``_init_blocks``, called after the predictor's own layers are built)."""

    def _make_blocks(self, width: int, heads: int, cross_layers: int, self_layers: int) -> None:
        self.self_blocks = nn.ModuleList(CrossAttentionBlock(width, heads, cross=False) for _ in range(self_layers))
        self.cross_blocks = nn.ModuleList(CrossAttentionBlock(width, heads) for _ in range(cross_layers))
        self.ln = nn.LayerNorm(width)

    def _init_blocks(self) -> None:
        for blocks in (self.self_blocks, self.cross_blocks):
            for b in blocks:
                b.init_reference(len(blocks))

    def slots(self, positions: torch.Tensor, count: int | None = None) -> Slots | None:
        """The query slots (``model.slots.query_slots``) of the positions [B, L] ``predict`` reads, when only those
        need computing: without self-attention layers every query position is computed independently of the
        others. None with self-attention layers (every position is read). The masked copy can then be encoded
        at the slots only (``masked.encode_*_pair(..., queries=idx)``) and passed to ``predict`` with them.
        ``count``: the largest number of positions in a sample, if known on the host (no device sync)."""
        return None if len(self.self_blocks) else query_slots(positions, count)

    def _queries(self, x: torch.Tensor, positions: torch.Tensor, count: int | None,
                 slots: Slots | None) -> tuple[torch.Tensor, Slots] | None:
        """``predict``'s path: the slots and ``x`` at them ([B, M, E]; None: the full path, every position)."""
        if len(self.self_blocks):
            if slots is not None:
                raise ValueError("query slots need a cross-attention-only predictor (self_layers: 0)")
            return None
        if slots is None:
            slots = query_slots(positions, count)
            x = take(x, slots[0])
        return x, slots

    def _decode(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        for b in self.self_blocks:
            x = b(x)
        for b in self.cross_blocks:
            x = b(x, y)
        return self.ln(x)


class TextPredictor(_Predictor):
    """Predicts the original tokens at masked text positions from the masked text and the full image."""

    def __init__(self, width: int, heads: int, cross_layers: int = 2, self_layers: int = 0, vocab_size: int = 49408):
        super().__init__()
        self._make_blocks(width, heads, cross_layers, self_layers)
        self.head = nn.Linear(width, vocab_size)
        self._init_blocks()
        nn.init.xavier_uniform_(self.head.weight)

    def predict(self, x: torch.Tensor, x_global: torch.Tensor, y: torch.Tensor, y_global: torch.Tensor,
                positions: torch.Tensor, count: int | None = None,
                slots: Slots | None = None) -> torch.Tensor:
        """What the vocabulary head (``head``) reads at the masked ``positions`` [B, L] (bool): [n_masked, E] in the
        order of ``x[positions]``. x: masked text tokens [B, L, E], or with ``slots`` (``self.slots(positions)``)
        the tokens at its idx only, [B, M, E] (what ``encode_text_pair(..., queries=idx)`` returns); y: full image
        patches [B, N, E]. Without self-attention layers only the masked queries are computed (same values); the
        training loss applies the head fused with its NLL (``losses.text_reconstruction_loss``)."""
        packed = self._queries(x, positions, count, slots)
        if packed is None:
            return self._decode(inject_global(x, x_global), inject_global(y, y_global))[positions]
        xq, (_, valid) = packed
        return self._decode(inject_global(xq, x_global), inject_global(y, y_global))[valid]


class ImagePredictor(_Predictor):
    """Predicts the (per-patch normalised) pixels of the masked image from the masked image and the full text."""

    def __init__(self, width: int, heads: int, grid: int, patch_size: int, cross_layers: int = 3,
                 self_layers: int = 0):
        super().__init__()
        self.decoder_embed = nn.Linear(width, width)
        self.register_buffer("pos_embed", sincos_2d(width, grid).unsqueeze(0), persistent=False)
        self._make_blocks(width, heads, cross_layers, self_layers)
        self.proj = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, patch_size * patch_size * 3))
        self._init_blocks()
        nn.init.xavier_uniform_(self.proj[1].weight, gain=1 / math.sqrt(width))
        nn.init.zeros_(self.proj[1].bias)

    def predict(self, x: torch.Tensor, x_global: torch.Tensor, y: torch.Tensor, y_global: torch.Tensor,
                positions: torch.Tensor, count: int | None = None,
                slots: Slots | None = None) -> torch.Tensor:
        """The (norm-pix) pixel predictions at the masked ``positions`` [B, N] (bool): [n_masked, P*P*3] in the
        order of ``x[positions]`` (what ``losses.image_reconstruction_loss`` reads). x: masked image patches
        [B, N, E], or with ``slots`` (``self.slots(positions)``) the patches at its idx only, [B, M, E] (what
        ``encode_image_pair(..., queries=idx)`` returns); y: full text tokens [B, L, E]. Without self-attention
        layers only the masked queries are computed (same values)."""
        packed = self._queries(x, positions, count, slots)
        if packed is None:
            x = self.decoder_embed(inject_global(x, x_global)) + self.pos_embed.to(x.dtype)
            return self._decode(x, inject_global(y, y_global))[positions]
        xq, (idx, valid) = packed
        # the injection, decoder_embed and the positions act on each token alone: applied to the queries only
        x = self.decoder_embed(inject_global(xq, x_global)) + self.pos_embed[0].to(xq.dtype)[idx]
        return self._decode(x, inject_global(y, y_global))[valid]

    def _decode(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.proj(super()._decode(x, y))
