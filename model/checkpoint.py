"""A training run's checkpoints: resumable ``step-*.pt`` files (task, optimiser, schedule, scaler, step, the run's
length, RNG states, the run's settings, the content hashes of the tables it trains on), written atomically; which
one a run continues from, and the refusal to mix two runs in one ``out_dir`` (``checkpoint_to_resume``): other
settings or other data. A raised ``max_steps`` / ``epochs`` is no other run: the run continues (``extension``)."""
from __future__ import annotations

import logging
import random
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from data_schemas.config import ConfigError, keyed_fields

if TYPE_CHECKING:
    from .train_config import TrainConfig
    from .train_state import TrainState

log = logging.getLogger(__name__)


def _atomic_save(obj, path: Path) -> None:
    from data_schemas import replace_file

    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, lambda tmp: torch.save(obj, tmp))


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    ck = sorted((Path(out_dir) / "checkpoints").glob("step-*.pt"))
    return ck[-1] if ck else None


class ResumeRefused(ConfigError):
    """A run that would mix with another one in its ``out_dir``: resumed with other settings, or started afresh
    over its checkpoints without ``resume: fresh`` (one line from ``macco``)."""


RUN_FILES = ("checkpoints", "export", "export.pt", "metrics.csv", "summary.json", "config.json", "logs")


def table_hashes(tables: dict) -> dict[str, str | None]:
    """{table name: its manifest's content hash} of the tables a run reads (``TrainConfig.tables``): what the run
    trained on, whatever folder holds it (a table moved keeps its hash; a table rewritten with other rows does not)."""
    from data_schemas import TableError, read_manifest

    out: dict[str, str | None] = {}
    for name, path in sorted(tables.items()):
        try:
            out[name] = read_manifest(path, name).get("content_hash")
        except TableError:  # check_tables names a missing table before any run; here it is just not the same data
            out[name] = None
    return out


def _other_data(path: Path, ck: dict, cfg: TrainConfig) -> str | None:
    """Why the run's tables are not the data the checkpoint trained on (one line), or None. A checkpoint written
    before the record existed (no ``tables``) is accepted with a warning: its data cannot be verified."""
    then = ck.get("tables")
    if then is None:
        log.warning("%s: this checkpoint does not record the tables it trained on (written before that record): "
                    "resuming it on the tables given, unverified", path)
        return None
    now = table_hashes(cfg.tables)
    diff = [k for k in sorted(set(then) | set(now)) if then.get(k) != now.get(k)]
    if not diff:
        return None
    short = lambda h: "none" if h is None else str(h)[:12]  # noqa: E731
    shown = ", ".join(f"{k} {short(then.get(k))} -> {short(now.get(k))}" for k in diff[:4])
    return (f"{path}: this checkpoint was trained on other data (content hash {shown}); resuming would mix two runs "
            f"in {cfg.out_dir}: give the same tables, another out_dir, or resume: fresh to replace that run")


def _same(a, b) -> bool:
    plain = lambda v: list(v) if isinstance(v, tuple) else v  # noqa: E731 (a checkpoint stores tuples as lists)
    return plain(a) == plain(b)


def checkpoint_to_resume(cfg: TrainConfig, total: int | None = None) -> tuple[Path | None, dict | None]:
    """(the checkpoint a run continues from and its contents, or None) as ``cfg.resume`` asks: ``auto`` the latest in
    ``out_dir`` (none: a new run), a path that checkpoint, ``fresh`` none (the folder's earlier run files removed),
    None none — refused when ``out_dir`` holds another run's checkpoints. A checkpoint trained with other settings
    (any field but those flagged ``unkeyed``: where its files are, how it logs and saves, where it runs) or on other
    data (the tables' content hashes, ``table_hashes``; their folders may move) is refused in one line naming the
    differences. The run's length (``SCHEDULE_LENGTH``) may be raised: ``total`` steps (the run's, from its
    settings) past the checkpoint's run is a continuation (``extension``)."""
    import shutil

    out = Path(cfg.out_dir)
    latest = latest_checkpoint(out)
    if cfg.resume == "fresh":
        for name in RUN_FILES:
            target = out / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
        return None, None
    if cfg.resume is None:
        if latest is not None:
            raise ResumeRefused(f"{out}: holds a training run's checkpoints (latest {latest.name}); resume: auto "
                                "continues it (same settings), resume: fresh starts over and replaces it, or give "
                                "another out_dir")
        return None, None
    path = latest if cfg.resume == "auto" else Path(cfg.resume)
    if path is None:
        return None, None
    if not path.is_file():
        raise FileNotFoundError(f"{path}: checkpoint to resume not found (resume)")
    from .factory import weights_file

    with weights_file(path):  # a damaged checkpoint is one line naming it
        ck = torch.load(path, map_location="cpu", weights_only=True)
    then, now = ck.get("config", {}), asdict(cfg)
    diff = [k for k in keyed_fields(cfg) if not _same(now[k], then.get(k))]
    if diff and set(diff) <= set(SCHEDULE_LENGTH):
        longer = extension(path, ck, total)
        if isinstance(longer, str):
            raise ResumeRefused(longer)
        diff = [] if longer else diff
    if diff:
        shown = ", ".join(f"{k} {then.get(k)!r} -> {now[k]!r}" for k in diff[:4]) + (" ..." if len(diff) > 4 else "")
        raise ResumeRefused(f"{path}: this checkpoint was trained with other settings ({shown}); resuming would mix "
                            f"two runs in {out}: give another out_dir, or resume: fresh to replace that run")
    other = _other_data(path, ck, cfg)
    if other:
        raise ResumeRefused(other)
    return path, ck


# the run's length: raised on resume, the run continues to the new length (the other settings stay refused)
SCHEDULE_LENGTH = ("epochs", "max_steps")


def extension(path: Path, ck: dict, total: int | None) -> bool | str:
    """Whether a resume whose length settings differ from the checkpoint's (only those) extends its run: True when
    the run's new ``total`` steps are at least the checkpoint's run's; one line why not when shorter (a run is not
    cut below what its schedule was); False when the checkpoint records no length (written before it did) or no
    ``total`` is known: then the change is refused as any other setting."""
    before = ck.get("total")
    if before is None or total is None:
        return False
    if total < int(before):
        return (f"{path}: this checkpoint's run is {before} steps long; max_steps / epochs may be raised on resume "
                f"(the run continues), not lowered ({total} steps): give another out_dir, or resume: fresh")
    log.info("%s: extending the run from %s to %d steps (it continues at step %s, same optimiser and schedule "
             "state; the lr schedule recomputed over the %d steps)", path, before, total, ck.get("step"), total)
    return True


def save(state: TrainState, step: int) -> Path:
    """A resumable checkpoint: task, optimiser, schedule, scaler, step, the RNG states and the content hashes of the
    tables trained on (``table_hashes``: a resume on other data is refused)."""
    path = state.out_dir / "checkpoints" / f"step-{step:07d}.pt"
    _atomic_save({"task": state.task.state_dict(), "optimizer": state.opt.state_dict(),
                  "scheduler": state.sched.state_dict(), "scaler": state.scaler.state_dict(), "step": step,
                  "total": state.total,
                  "config": asdict(state.cfg), "tables": table_hashes(state.cfg.tables),
                  "rng": {"torch": torch.get_rng_state(), "python": random.getstate()}}, path)
    return path


def resume(state: TrainState, path: Path, ck: dict | None = None) -> None:
    """``save``'s inverse: the run continues at the saved step with the same schedule and randomness (``ck``: the
    checkpoint's contents when already read)."""
    ck = ck if ck is not None else torch.load(path, map_location="cpu", weights_only=True)
    state.task.load_state_dict(ck["task"])
    state.opt.load_state_dict(ck["optimizer"])
    state.sched.load_state_dict(ck["scheduler"])
    state.scaler.load_state_dict(ck["scaler"])
    state.start = int(ck["step"])
    state.resumed_from = Path(path)
    if ck.get("total") is not None and int(ck["total"]) != state.total:  # an extension: the new length's lr from here
        for group, base, factor in zip(state.opt.param_groups, state.sched.base_lrs, state.sched.lr_lambdas):
            group["lr"] = base * factor(state.start)
        state.sched._last_lr = [group["lr"] for group in state.opt.param_groups]
    torch.set_rng_state(ck["rng"]["torch"])
    random.setstate(ck["rng"]["python"])
