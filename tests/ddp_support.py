"""One MACCO step on a global batch, in one process or split over gloo processes (tests/unit/test_train.py)."""
from __future__ import annotations

from pathlib import Path

import torch

CAPTIONS = ["a red circle left of a blue square", "a dog on a couch", "two cats", "a small green cross above a cat",
            "the yellow triangle right of the purple hexagon", "a horse", "a big white dog near a black cat",
            "an orange diamond below a red square"]


def make_task(cfg: dict):
    import open_clip

    from model.factory import register_model_configs
    from model.task import MaccoConfig, MaccoTask
    from model.task_hardneg import HardNegativeTask
    from model.train_config import HARDNEG_STYLES

    register_model_configs()
    torch.manual_seed(0)
    clip = open_clip.create_model("macco-micro")
    return (HardNegativeTask if cfg.get("mode") in HARDNEG_STYLES else MaccoTask)(clip, MaccoConfig(**cfg))


def make_batch() -> dict:
    """8 samples of uneven masks: samples 2 and 5 have no text mask, 1 and 6 no masked patch (so a rank's
    share of masked samples differs from the other's)."""
    import open_clip

    g = torch.Generator().manual_seed(3)
    texts = open_clip.get_tokenizer("macco-micro")(CAPTIONS)
    B = len(CAPTIONS)
    text_mask = torch.zeros(B, 77, dtype=torch.bool)
    for i, n in enumerate([2, 1, 0, 3, 2, 0, 1, 2]):
        eot = int(texts[i].argmax())
        text_mask[i, torch.randperm(eot - 1, generator=g)[:n] + 1] = True
    image_mask = torch.rand(B, 16, generator=g) < 0.3
    image_mask[[1, 6]] = False
    image_mask[0, :3] = True
    hard = open_clip.get_tokenizer("macco-micro")([c.replace("a ", "the ", 1) for c in CAPTIONS])
    batch = {"image": torch.randn(B, 3, 32, 32, generator=g), "text": texts, "text_mask": text_mask,
             "image_mask": image_mask, "hard_text": hard}
    # the hard-negative modes' slots (model.task_hardneg): 4 per caption, some missing (sample 3 has none)
    slots = [[" ".join(c.split()[::-1]), c.replace("a ", "one ", 1), c + " twice", "###"] for c in CAPTIONS]
    batch["hard_texts"] = open_clip.get_tokenizer("macco-micro")(sum(slots, [])).reshape(B, 4, 77)
    valid = torch.rand(B, 4, generator=torch.Generator().manual_seed(5)) < 0.7
    valid[:, 3], valid[3] = False, False
    batch["hard_valid"] = valid
    return batch


def step(model, task, batch: dict, rows: slice) -> dict[str, torch.Tensor]:
    """The forward + backward of ``rows`` of the batch; returns the detached terms."""
    b = {k: v[rows] for k, v in batch.items()}
    out = model(b, sizes=task.sizes_for(b))  # the training loop's call (model: the task, or DDP around it)
    out["total_loss"].backward()
    return {k: v.detach() for k, v in out.items() if k.endswith("_loss")}


def grads(task) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in task.named_parameters() if p.grad is not None}


def worker(rank: int, world: int, init_file: str, cfgs: list[dict], out: str) -> None:
    """Rank ``rank`` of ``world``: for each task config, its contiguous share of the batch through DDP; rank 0
    saves, per config, the terms (averaged over ranks, as the training log does) and the synchronised
    gradients."""
    from model.train_step import terms_over_ranks

    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        results = []
        for cfg in cfgs:
            task = make_task(cfg)
            task.rank, task.world_size = rank, world
            model = torch.nn.parallel.DistributedDataParallel(
                task, find_unused_parameters=cfg.get("mode", "macco") != "macco")
            batch = make_batch()
            per = len(CAPTIONS) // world
            terms = step(model, task, batch, slice(rank * per, (rank + 1) * per))
            logged = terms_over_ranks(terms, world)  # what the training log reports
            results.append({"terms": {k: float(v) for k, v in logged.items()}, "grads": grads(task)})
        if rank == 0:
            torch.save(results, Path(out))
    finally:
        torch.distributed.destroy_process_group()


def two_process_steps(tmp: Path, cases: dict[str, dict]) -> dict[str, dict]:
    """Each case's step on 2 gloo processes (one spawn for all: the processes' start dominates), rank 0's results
    by case name."""
    import torch.multiprocessing as mp

    mp.start_processes(worker, args=(2, str(tmp / "init"), list(cases.values()), str(tmp / "rank0.pt")),
                       nprocs=2, join=True, start_method="spawn")
    return dict(zip(cases, torch.load(tmp / "rank0.pt", weights_only=True)))


def accum_state(model, task, accum_steps: int, batch_size: int, world: int):
    """A TrainState for ``model.train_step.train_step``: the task's parameters under SGD at lr 0 (the gradients are what
    is compared), no loss scaling."""
    from model.train_config import TrainConfig
    from model.train_state import TrainState

    cfg = TrainConfig(arch="macco-micro", batch_size=batch_size, accum_steps=accum_steps, log_every=1)
    opt = torch.optim.SGD([{"params": [p for p in task.parameters() if p.requires_grad], "name": "all"}], lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    return TrainState(cfg, task, model, opt, sched, torch.amp.GradScaler("cpu", enabled=False),
                      torch.device("cpu"), None, None, 1, 0, torch.distributed.get_rank() if world > 1 else 0, world,
                      {}, Path("."))


def accumulated_grads(state, batch: dict) -> tuple[dict, dict]:
    """One ``train_step`` over ``batch``: (its logged terms, the gradients the optimiser saw)."""
    from model.train_step import train_step

    seen: dict = {}
    real = state.scaler.step

    def step(opt):
        seen.update(grads(state.task))
        return real(opt)

    state.scaler.step = step
    terms, _ = train_step(state, batch, 0, stats=True)
    return {k: float(v) for k, v in terms.items()}, seen


def accum_worker(rank: int, world: int, init_file: str, out: str) -> None:
    """Rank ``rank``: a step of 2 accumulated micro-batches through DDP, counting the gradient all-reduces (a DDP
    comm hook); and, for comparison, the same rows as one micro-batch."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        res = {}
        per = len(CAPTIONS) // world
        for accum in (1, 2):
            task = make_task({"mode": "macco"})
            task.rank, task.world_size = rank, world
            model = torch.nn.parallel.DistributedDataParallel(task)
            calls = {"n": 0}

            def hook(state, bucket, calls=calls):
                calls["n"] += 1
                return allreduce_hook(None, bucket)

            model.register_comm_hook(None, hook)
            batch = {k: v[rank * per:(rank + 1) * per] for k, v in make_batch().items()}
            terms, g = accumulated_grads(accum_state(model, task, accum, per, world), batch)
            res[accum] = {"allreduces": calls["n"], "grads": g}
        if rank == 0:
            torch.save(res, Path(out))
    finally:
        torch.distributed.destroy_process_group()
