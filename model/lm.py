"""A text tower that knows syntax: the causal language-model stage of a base (``mode: lm``).

Pretrained CLIP's text encoder encodes word order (SentEval's BigramShift and TopConstituents probes read it from
its features) although its contrastive use ignores it; a text tower trained only contrastively on batches a bag of
words can win has nothing of the kind. ``LMTask`` trains the text tower alone as a causal language model on the
training captions: at every position up to the end-of-text token, the next token, through a training-only linear
head on the tower's token features (after ``ln_final``, before the projection). The head's softmax runs over the
tokens of the training captions (``lm_vocabulary``): every target is among them, so it is the exact model of that
corpus, at a fraction of the 49,408-way cost. The export is the plain CLIP.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from .losses import LM_WEIGHTS, lm_loss, total_loss
from .masked import _embed_text, supports_trimmed_text


def lm_vocabulary(token_masks: str | Path, captions: str | Path, split: str | None) -> list[int]:
    """The token ids of the ``split`` captions (comma-separated splits; None: all), sorted."""
    from data_schemas import TABLES, read_table

    splits = None if split is None else set(split.split(","))
    keep = {r["caption_id"] for r in read_table(TABLES["captions"], captions, ["caption_id", "split"]).to_pylist()
            if splits is None or r["split"] in splits}
    ids: set[int] = set()
    for r in read_table(TABLES["token_masks"], token_masks, ["caption_id", "token_ids", "eot_idx"]).to_pylist():
        if r["caption_id"] in keep:
            ids.update(r["token_ids"][:r["eot_idx"] + 1])
    return sorted(ids)


class LMTask(nn.Module):
    """CLIP + a training-only next-token head on the text tower; loss = the mean cross-entropy of the next token
    at every position before the end-of-text token. Only the text tower (embeddings, blocks, ``ln_final``)
    trains."""
    masks_text = masks_image = False  # model.training_task.TrainingTask
    reads_text = True
    logit_scale_max = math.log(100)


    def __init__(self, clip: nn.Module, vocab_ids: list[int]):
        super().__init__()
        if not vocab_ids:
            raise ValueError("mode lm: no training caption tokens to model")
        if not supports_trimmed_text(clip):
            raise ValueError(f"mode lm: needs a causal CLIP text tower (open_clip CLIP, EOT pooling); the model is a "
                             f"{type(clip).__name__} (e.g. SigLIP's bidirectional text tower has no next-token order)")
        self.clip = clip
        width = clip.ln_final.normalized_shape[0]
        self.lm_head = nn.Linear(width, len(vocab_ids))
        self.register_buffer("vocab_ids", torch.tensor(vocab_ids, dtype=torch.long), persistent=False)
        index = torch.full((int(max(vocab_ids)) + 1,), -1, dtype=torch.long)
        index[self.vocab_ids] = torch.arange(len(vocab_ids))
        self.register_buffer("index", index, persistent=False)  # token id -> its row of the head
        self._host_index = index.clone()  # the same on the CPU: the loop checks a batch before it is on the device
        for p in clip.parameters():
            p.requires_grad_(False)
        for m in (clip.token_embedding, clip.transformer, clip.ln_final):
            for p in m.parameters():
                p.requires_grad_(True)
        clip.positional_embedding.requires_grad_(True)

    def token_features(self, text: torch.Tensor) -> torch.Tensor:
        """[B, L, width]: the text tower's token features after ``ln_final`` (before the projection)."""
        clip = self.clip
        L = text.shape[1]
        x = _embed_text(clip, text) + clip.positional_embedding[:L].to(clip.transformer.get_cast_dtype())
        attn_mask = clip.attn_mask[:L, :L] if clip.attn_mask is not None else None
        return clip.ln_final(clip.transformer(x, attn_mask=attn_mask))

    @staticmethod
    def _targets(text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the positions that predict a token [B, L-1] bool, those tokens): every position up to the EOT."""
        eot = text.argmax(dim=-1)  # the end-of-text token has the largest id
        pos = torch.arange(text.shape[1] - 1, device=text.device)
        valid = pos.unsqueeze(0) < eot.unsqueeze(1)  # position t predicts token t + 1
        return valid, text[:, 1:][valid]

    @staticmethod
    def _check_vocabulary(target: torch.Tensor, index: torch.Tensor) -> None:
        if (target >= len(index)).any() or (index[target.clamp(max=len(index) - 1)] < 0).any():
            raise ValueError("mode lm: a caption token is outside the vocabulary of the training captions")

    def sizes_for(self, batch: dict) -> list:
        """The (host) batch's next tokens checked against the head's vocabulary, on the CPU (no shapes to
        precompute, ``MaccoTask.sizes_for``): ``forward`` given this answer does not check them again."""
        self._check_vocabulary(self._targets(batch["text"])[1], self._host_index)
        return []

    def forward(self, batch: dict[str, torch.Tensor], stats: bool = True, sizes=None) -> dict[str, torch.Tensor]:
        """The training tasks' signature: the batch's ``text`` -> the next-token term. ``sizes`` None (called
        outside the loop, which passes ``sizes_for``'s answer): the tokens are checked here."""
        text = batch["text"]
        valid, target = self._targets(text)
        if sizes is None:
            self._check_vocabulary(target, self.index)
        h = self.token_features(text)[:, :-1][valid]
        rows = self.index[target]
        logits = self.lm_head(h).float()
        terms = {"lm_loss": lm_loss(logits, rows)}
        terms["total_loss"] = total_loss(terms, LM_WEIGHTS)
        if stats:
            with torch.no_grad():
                terms["lm_acc"] = (logits.argmax(-1) == rows).float().mean()
        return terms
