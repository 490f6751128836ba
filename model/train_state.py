"""``TrainState``: everything a training step needs, built once by ``model.train.setup`` (and read by the run log);
``MicroBatch``: one micro-batch's gradient pass of an accumulated step."""
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


@dataclass
class MicroBatch:
    """The gradient pass of micro-batch ``index`` in an accumulated step (``model.train_step.train_step``, open_clip's
    ``accum_freq``): ``rows`` holds, per micro-batch, what the step's batch-level terms read of each sample,
    computed without gradient (a task's ``batch_rows``). A task that accumulates takes it as ``forward``'s ``micro``
    and returns each term as this pass's share: the step's terms are the sums over the passes, and the sum of the
    passes' ``total_loss`` gradients is the gradient of the unaccumulated step on the whole batch."""
    rows: list[dict[str, torch.Tensor]]
    index: int

    @property
    def passes(self) -> int:
        return len(self.rows)

    @property
    def last(self) -> bool:
        """The pass that also carries the gradient of what the batch-level terms read directly (the logit scale and
        bias): once per step, not once per pass."""
        return self.index == len(self.rows) - 1

    def splice(self, live: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The whole batch's rows: the cached ones, this micro-batch's replaced by ``live`` (with gradient)."""
        return {k: torch.cat([live[k] if i == self.index else r[k] for i, r in enumerate(self.rows)]) for k in live}

    def share(self, term: torch.Tensor) -> torch.Tensor:
        """A batch-level term (computed whole in every pass): 1 / passes of its value, all of its gradient (which
        reaches this micro-batch's live rows only, so the passes' gradients add up to the whole one)."""
        value = term.detach()
        return value / self.passes + (term - value)
