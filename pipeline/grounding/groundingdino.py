"""GroundingDINO through groundingdino-py (IDEA's code): the user's ``.pth`` + config file + a local BERT dir.

Runs batched (one prompt per image, "phrase a . phrase b ."), fp16 autocast on CUDA, no network: the text
encoder is always a local directory. Boxes are attributed to phrases through the tokenizer's offsets
(``base.select_boxes``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .base import Box, GroundingConfig, GroundItem, ground_in_batches

IGNORED_MISSING = ("bert.embeddings.position_ids",)


class GroundingDinoGrounder:
    name = "groundingdino"
    needs_images = True

    def __init__(self, cfg: GroundingConfig):
        import torch
        from groundingdino.models import build_model
        from groundingdino.util.misc import clean_state_dict
        from groundingdino.util.slconfig import SLConfig

        for field_name in ("checkpoint", "config_file", "bert_dir"):
            value = getattr(cfg, field_name)
            if not value or not Path(value).exists():
                raise FileNotFoundError(f"groundingdino backend: {field_name} {value!r} not found "
                                        "(give the .pth checkpoint, its config .py and a local BERT directory)")
        self.cfg = cfg
        args = SLConfig.fromfile(cfg.config_file)
        args.device = cfg.device
        args.text_encoder_type = str(cfg.bert_dir)
        self.model = build_model(args)
        ckpt = torch.load(cfg.checkpoint, map_location="cpu", weights_only=True)
        state = clean_state_dict(ckpt["model"] if isinstance(ckpt, dict) and "model" in ckpt else ckpt)
        res = self.model.load_state_dict(state, strict=False)
        missing = [k for k in res.missing_keys if not k.endswith(IGNORED_MISSING)]
        if missing or res.unexpected_keys:
            raise ValueError(f"{cfg.checkpoint}: does not match {cfg.config_file}: missing {missing[:5]} "
                             f"({len(missing)}), unexpected {res.unexpected_keys[:5]} ({len(res.unexpected_keys)})")
        self.model.eval().to(cfg.device)
        self.tokenizer = self.model.tokenizer
        import groundingdino.datasets.transforms as T

        size = int(cfg.extra.get("image_size", 800))
        self.transform = T.Compose([T.RandomResize([size], max_size=int(cfg.extra.get("max_size", 1333))),
                                    T.ToTensor(), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])

    def _forward(self, tensors, prompts):
        import torch
        from groundingdino.util.misc import NestedTensor, nested_tensor_from_tensor_list

        class _Batch(NestedTensor):  # the model reads ``samples.device`` before it batches a list itself
            @property
            def device(self):
                return self.tensors.device

        padded = nested_tensor_from_tensor_list([t.to(self.cfg.device) for t in tensors])
        batch = _Batch(padded.tensors, padded.mask)  # padding mask kept: boxes stay relative to each image
        on_cuda = str(self.cfg.device).startswith("cuda")
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=on_cuda and self.cfg.half):
            out = self.model(batch, captions=prompts)
        return out["pred_logits"].float().sigmoid().cpu().numpy(), out["pred_boxes"].float().cpu().numpy()

    def _forward_items(self, batch: list[GroundItem], prompts: list[str]):
        return self._forward([self.transform(it.image, None)[0] for it in batch], prompts)

    def ground(self, items: Sequence[GroundItem]) -> list[list[list[Box]]]:
        return ground_in_batches(items, self.cfg, self._forward_items, self.tokenizer)
