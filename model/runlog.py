"""The training run's bookkeeping: skipped images (``SkipCount``) and the one logger (``RunLog``: metrics.csv,
TensorBoard, the progress bar, the flow's callback), and the progress line format."""
from __future__ import annotations

import csv
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from data_schemas import InputFileError

if TYPE_CHECKING:
    from .train_config import TrainConfig
    from .train_state import TrainState


class TooManySkipped(InputFileError):
    """More unreadable (or resized) training images than ``max_skipped_fraction`` allows: the run would report success
    on data it did not use (the data's problem: one line from ``macco``)."""


class SkipCount:
    """Unreadable images skipped so far; past ``max_skipped_fraction`` of the samples drawn, ``TooManySkipped``."""

    def __init__(self, cfg: TrainConfig):
        self.cfg, self.n, self.examples = cfg, 0, []

    def add(self, skipped: list[tuple], steps_done: int) -> None:
        if not skipped:
            return
        self.n += len(skipped)
        self.examples += skipped[:max(0, 20 - len(self.examples))]
        drawn = steps_done * self.cfg.batch_size
        if self.n > self.cfg.max_skipped_fraction * drawn and drawn >= self.cfg.batch_size:
            raise TooManySkipped(f"{self.n} of {drawn} training images drawn so far could not be used: unreadable or resized (more than "
                                 f"max_skipped_fraction={self.cfg.max_skipped_fraction}); e.g. "
                                 + "; ".join(f"caption {c}: {p} ({why})" for c, p, why in self.examples[:3]))

    def summary(self) -> dict:
        return {"skipped_images": self.n,
                "skipped_examples": [{"caption_id": c, "path": p, "error": why} for c, p, why in self.examples]}


def keep_rows_through(metrics: Path, step: int) -> None:
    """Drop the rows of ``metrics.csv`` after ``step`` (atomically): a resumed run re-logs them."""
    if not metrics.exists():
        return
    with metrics.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = [r for r in reader if int(r["step"]) <= step]
        header = reader.fieldnames
    from data_schemas import replace_file

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as f:
            if header:
                w = csv.DictWriter(f, fieldnames=header)
                w.writeheader()
                w.writerows(rows)

    replace_file(metrics, write)


class RunLog:
    """The run's one logger (rank 0): ``metrics.csv``, TensorBoard, the progress bar and ``on_log`` (the flow's
    log and progress artifact), every ``log_every`` steps; ``config.json`` at the start."""

    def __init__(self, state: TrainState, on_log: Callable[[dict], None] | None):
        self.state, self.on_log, self.history = state, on_log, []
        self.active = state.is_main
        self.writer = self.file = self.csv = self.bar = None
        self.t0 = time.perf_counter()
        if not self.active:
            return
        cfg, out_dir = state.cfg, state.out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "config.json").write_text(json.dumps(asdict(cfg), indent=2, default=str))
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(out_dir / "logs"))
        except ImportError:
            self.writer = None
        metrics = out_dir / "metrics.csv"
        if state.start > 0:
            keep_rows_through(metrics, state.start)  # a killed run logged steps past its last checkpoint
        self.file = open(metrics, "a", newline="")
        if cfg.progress:
            from tqdm import tqdm

            self.bar = tqdm(total=state.total, initial=state.start, desc=f"train {cfg.mode}", dynamic_ncols=True)

    def due(self, step: int) -> bool:
        """Whether ``step`` is logged: the same on every rank (the step's statistics and, under DDP, the terms'
        average over ranks are computed on all of them); only rank 0 writes."""
        return (step + 1) % max(self.state.cfg.log_every, 1) == 0 or step + 1 == self.state.total

    def log(self, step: int, terms: dict, lrs: dict, skipped: int) -> None:
        if not self.active:
            return
        st = self.state
        row = {"step": step + 1, "lr_clip": lrs["clip_decay"], "lr_predictor": lrs["predictor"],
               **{k: round(float(v), 6) for k, v in terms.items()}, "skipped_images": skipped,
               "elapsed_s": round(time.perf_counter() - self.t0, 2)}
        self.history.append(row)
        if self.csv is None:
            self.csv = csv.DictWriter(self.file, fieldnames=list(row))
            if self.file.tell() == 0:
                self.csv.writeheader()
        self.csv.writerow(row)
        self.file.flush()
        if self.writer is not None:
            for k, v in row.items():
                if k != "step":
                    self.writer.add_scalar(k, v, step + 1)
        done, elapsed = step + 1 - st.start, time.perf_counter() - self.t0
        rate = done * st.cfg.batch_size * st.world / elapsed
        if self.bar is not None:  # every loss term and the rate, as the flow's lines; tqdm shows the time left
            self.bar.set_postfix_str(" ".join(f"{k.removesuffix('_loss')} {v:.4f}" for k, v in row.items()
                                              if k.endswith("_loss")) + f" | {rate:.0f} samples/s")
        if self.on_log is not None:
            self.on_log({**row, "total_steps": st.total, "samples_per_s": rate,
                         "eta_s": elapsed / done * (st.total - step - 1)})

    def advance(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        for h in (self.bar, self.file, self.writer):
            if h is not None:
                h.close()


def format_log_row(name: str, row: dict) -> str:
    """One progress line: step/total, the loss terms, samples/s and the time left."""
    eta = int(round(row["eta_s"]))
    losses = " ".join(f"{k.removesuffix('_loss')} {v:.4f}" for k, v in row.items() if k.endswith("_loss"))
    return (f"train {name}: step {row['step']}/{row['total_steps']} ({100 * row['step'] / row['total_steps']:.0f} %)"
            f" | {losses} | {row['samples_per_s']:.0f} samples/s | ETA {eta // 60}m{eta % 60:02d}s")


def progress_printer(cfg: TrainConfig) -> Callable[[dict], None] | None:
    """Without a progress bar (the flow's torchrun runs, ``progress: false``): one line per logged step on
    stderr (stdout stays for results)."""
    if cfg.progress:
        return None
    return lambda row: print(format_log_row(cfg.mode, row), file=sys.stderr, flush=True)
