"""GroundingDINO through transformers' ``GroundingDinoForObjectDetection`` from a local model directory."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .base import Box, GroundingConfig, GroundItem, build_prompt, phrase_token_indices, select_boxes, size_batches


class HFGroundingDinoGrounder:
    name = "hf"
    needs_images = True

    def __init__(self, cfg: GroundingConfig):
        from transformers import AutoProcessor, GroundingDinoForObjectDetection

        if not cfg.model_dir or not Path(cfg.model_dir).is_dir():
            raise FileNotFoundError(f"hf backend: model_dir {cfg.model_dir!r} not found (a save_pretrained "
                                    "directory with the model and its processor)")
        self.cfg = cfg
        self.processor = AutoProcessor.from_pretrained(cfg.model_dir, local_files_only=True)
        self.model = GroundingDinoForObjectDetection.from_pretrained(cfg.model_dir, local_files_only=True)
        self.model.eval().to(cfg.device)

    def ground(self, items: Sequence[GroundItem]) -> list[list[list[Box]]]:
        import torch

        results: list[list[list[Box]]] = [[] for _ in items]
        on_cuda = str(self.cfg.device).startswith("cuda")
        for idx in size_batches(items, self.cfg.batch_size):
            batch = [items[i] for i in idx]
            prompts, spans = zip(*(build_prompt(it.phrases) for it in batch))
            inputs = self.processor(images=[it.image for it in batch], text=list(prompts), return_tensors="pt",
                                    padding=True).to(self.cfg.device)
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=on_cuda and self.cfg.half):
                out = self.model(**inputs)
            probs = out.logits.float().sigmoid().cpu().numpy()
            boxes = out.pred_boxes.float().cpu().numpy()
            for b, it in enumerate(batch):
                offsets = self.processor.tokenizer(prompts[b], return_offsets_mapping=True)["offset_mapping"]
                toks = phrase_token_indices(offsets, spans[b])
                results[idx[b]] = select_boxes(probs[b], boxes[b], toks, it.phrases, self.cfg.box_threshold,
                                               self.cfg.text_threshold, it.width, it.height,
                                               self.cfg.max_boxes_per_phrase)
        return results
