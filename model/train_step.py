"""One optimiser step of the training loop (``model.train``): the micro-batches of an accumulated step, the replay
of the caching pass's random draws, the finite check, gradient clipping, and the DDP average of the logged terms.

Gradient accumulation (``accum_steps``) is open_clip's ``accum_freq``, but the contrastive terms see the whole
batch, not each micro-batch: the step's gradients are the unaccumulated step's. ``grad_clip_norm`` is open_clip's
``--grad-clip-norm``.
"""
from __future__ import annotations

import contextlib

import torch

from .train_state import MicroBatch, TrainState


class NonFiniteLoss(FloatingPointError):
    """A step's loss is NaN or infinite: the run stops rather than step on it (or save it)."""


def train_step(state: TrainState, batch: dict, step: int, stats: bool) -> tuple[dict[str, torch.Tensor], dict]:
    """One optimiser step over ``batch``: the loss terms (detached) and the learning rates the step used, by
    parameter group name. With ``accum_steps`` k > 1 (open_clip's ``accum_freq``) the batch runs as k
    micro-batches: a pass without gradient caches what the batch-level terms read of every sample
    (``batch_rows``), then each micro-batch is encoded again with gradient (the same random draws: the masks come
    with the batch, the forward's own draws are replayed) and spliced into the cached rows, so the contrastive
    terms contrast the whole batch and the summed gradients are the unaccumulated step's (tested). Then, with
    ``grad_clip_norm``, every gradient is clipped to that total norm (after unscaling)."""
    cfg, task, device = state.cfg, state.task, state.device
    host = batch
    batch = {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}
    parts = micro_batches(host, cfg.accum_steps)
    # the step's shapes from the host copy of the batch: no device sync inside the step
    sizes = [task.sizes_for({k: v[sl] for k, v in host.items() if torch.is_tensor(v)}) for sl in parts]
    parts = [{k: v[sl] for k, v in batch.items() if torch.is_tensor(v)} for sl in parts]
    autocast = lambda: torch.autocast(device.type, dtype=state.amp_dtype,  # noqa: E731
                                      enabled=state.amp_dtype is not None)
    rows, draws = [], []
    if len(parts) > 1:
        with torch.no_grad(), autocast():
            for part, size in zip(parts, sizes):
                draws.append(_rng_state(device))
                rows.append(task.batch_rows(part, size))
    terms: dict[str, torch.Tensor] = {}
    for m, (part, size) in enumerate(zip(parts, sizes)):
        # under DDP the gradients are all-reduced once, after the last micro-batch (the sum is linear: the same
        # gradients as a reduction per micro-batch, with 1 / accum_steps of the communication)
        last = m == len(parts) - 1
        with contextlib.nullcontext() if last or state.world == 1 else state.model.no_sync():
            with _replayed(draws[m] if rows else None, device), autocast():
                kw = {"micro": MicroBatch(rows, m)} if rows else {}
                out = state.model(part, stats=stats, sizes=size, **kw)
            state.scaler.scale(out["total_loss"]).backward()
        for k, v in out.items():  # a micro-batch's terms are its shares of the step's (MicroBatch)
            terms[k] = terms.get(k, 0) + v.detach().float()
    if stats and state.world > 1:
        terms = terms_over_ranks(terms, state.world)
    check_every = 1 if device.type == "cpu" else max(cfg.log_every, 1)  # a finite check syncs the GPU
    if ((step + 1) % check_every == 0 or step == state.start) and not torch.isfinite(terms["total_loss"]):
        raise NonFiniteLoss(f"non-finite loss at step {step}: { {k: float(v) for k, v in terms.items()} }")
    lrs = {g["name"]: g["lr"] for g in state.opt.param_groups}
    if cfg.grad_clip_norm is not None:
        state.scaler.unscale_(state.opt)  # the norm of the true gradients; step() then does not unscale again
        torch.nn.utils.clip_grad_norm_(task.parameters(), cfg.grad_clip_norm)
    state.scaler.step(state.opt)
    state.scaler.update()
    state.opt.zero_grad(set_to_none=True)
    state.sched.step()
    with torch.no_grad():
        task.clip.logit_scale.clamp_(0, task.logit_scale_max)
    return terms, lrs


def micro_batches(host: dict, accum_steps: int) -> list[slice]:
    """The rows of each micro-batch: ``accum_steps`` slices as equal as the batch allows (a batch with skipped
    images is smaller than ``batch_size``; no slice is empty)."""
    n = next(v.shape[0] for v in host.values() if torch.is_tensor(v))
    k = max(1, min(accum_steps, n))
    bounds = [n * m // k for m in range(k + 1)]
    return [slice(a, b) for a, b in zip(bounds, bounds[1:])]


def _rng_state(device: torch.device) -> tuple:
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


@contextlib.contextmanager
def _replayed(state: tuple | None, device: torch.device):
    """The random draws of the caching pass again (dropout, patch dropout): its generator states, restored after
    (the step's generators advance once, by the caching pass). ``None``: no replay (an unaccumulated step)."""
    if state is None:
        yield
        return
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.set_rng_state(state[0])
        if state[1] is not None:
            torch.cuda.set_rng_state(state[1], device)
        yield


def terms_over_ranks(terms: dict[str, torch.Tensor], world: int) -> dict[str, torch.Tensor]:
    """The logged terms of a DDP step: each term the average over ranks (the global batch's value, see
    ``MaccoTask.samples_per_rank``), the ``empty_*`` sample counts summed."""
    names = sorted(terms)
    vec = torch.stack([terms[k].float() for k in names])
    torch.distributed.all_reduce(vec)
    return {k: v if k.startswith("empty_") else v / world for k, v in zip(names, vec)}
