"""``TrainState``: everything a training step needs, built once by ``model.train.setup`` (and read by the run log)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .train_config import TrainConfig


@dataclass
class TrainState:
    """Everything a step needs, built once by ``setup``."""
    cfg: TrainConfig
    task: torch.nn.Module  # MaccoTask or SceneTask (what is saved and exported)
    model: torch.nn.Module  # the task, wrapped for DDP / compiled (what runs the step)
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler
    device: torch.device
    amp_dtype: torch.dtype | None
    loader: object
    total: int  # steps of the whole run
    start: int  # the step it starts at (> 0 when resumed)
    rank: int
    world: int
    counts: dict  # build_samples' counts
    out_dir: Path
    resumed_from: Path | None = None  # the checkpoint a resumed run continues from

    @property
    def is_main(self) -> bool:
        return self.rank == 0
