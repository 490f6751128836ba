"""GroundingDINO through transformers' ``GroundingDinoForObjectDetection`` from a local model directory."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .base import Box, GroundingConfig, GroundItem, ground_in_batches


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

    def _forward(self, batch: list[GroundItem], prompts: list[str]):
        import torch

        on_cuda = str(self.cfg.device).startswith("cuda")
        inputs = self.processor(images=[it.image for it in batch], text=prompts, return_tensors="pt",
                                padding=True).to(self.cfg.device)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=on_cuda and self.cfg.half):
            out = self.model(**inputs)
        return out.logits.float().sigmoid().cpu().numpy(), out.pred_boxes.float().cpu().numpy()

    def ground(self, items: Sequence[GroundItem]) -> list[list[list[Box]]]:
        return ground_in_batches(items, self.cfg, self._forward, self.processor.tokenizer)
