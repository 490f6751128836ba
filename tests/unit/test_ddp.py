"""DDP semantics: a step over a global batch split across 2 gloo processes equals one process's step on the
whole batch — every loss term (averaged over ranks) and every gradient after DDP's all-reduce."""
import pytest
import torch
import torch.multiprocessing as mp

import ddp_support as ds

CASES = {
    "macco": {"mode": "macco"},
    "macco-self-attention": {"mode": "macco", "text_self_layers": 1, "image_self_layers": 1},
    "macco-hardneg-no-mca": {"mode": "macco", "hardneg": True, "mca": False},
    "clip-ft": {"mode": "clip-ft"},
}


@pytest.fixture(scope="module")
def two_process_steps(tmp_path_factory):
    """Every case's step on 2 gloo processes (one spawn for all: the processes' start dominates)."""
    tmp = tmp_path_factory.mktemp("ddp")
    mp.start_processes(ds.worker, args=(2, str(tmp / "init"), list(CASES.values()), str(tmp / "rank0.pt")),
                       nprocs=2, join=True, start_method="spawn")
    return dict(zip(CASES, torch.load(tmp / "rank0.pt", weights_only=True)))


@pytest.mark.parametrize("name", list(CASES))
def test_two_process_step_equals_one_process_step(name, two_process_steps):
    task = ds.make_task(CASES[name])
    ref_terms = ds.step(task, task, ds.make_batch(), slice(None))
    ref_grads = ds.grads(task)
    got = two_process_steps[name]
    assert set(got["terms"]) == set(ref_terms)
    for k, v in ref_terms.items():
        assert got["terms"][k] == pytest.approx(float(v), rel=1e-5, abs=1e-6), k
    assert set(got["grads"]) == set(ref_grads) and ref_grads
    for k, g in ref_grads.items():
        scale = g.abs().max().item() + 1e-12
        assert torch.allclose(got["grads"][k], g, rtol=1e-4, atol=1e-5 * scale), (k, (got["grads"][k] - g).abs().max())


def test_accumulated_micro_batches_all_reduce_once_and_equal_one_process(tmp_path):
    """Gradient accumulation under DDP all-reduced every micro-batch's gradients: with no_sync the reduction runs
    once per step (measured with a comm hook: as many all-reduce calls as one micro-batch's), and the gradients
    equal one process's accumulated step over the same global micro-batches."""
    mp.start_processes(ds.accum_worker, args=(2, str(tmp_path / "init"), str(tmp_path / "rank0.pt")), nprocs=2,
                       join=True, start_method="spawn")
    got = torch.load(tmp_path / "rank0.pt", weights_only=True)
    assert got[1]["allreduces"] > 0 and got[2]["allreduces"] == got[1]["allreduces"]
    # one process: micro-batch m holds every rank's m-th micro-batch (rank r's rows r*4 .. r*4+3, 2 per micro)
    order = [0, 1, 4, 5, 2, 3, 6, 7]
    batch = {k: v[order] for k, v in ds.make_batch().items()}
    task = ds.make_task({"mode": "macco"})
    _, ref = ds.accumulated_grads(ds.accum_state(task, task, 2, 8, 1), batch)
    assert set(got[2]["grads"]) == set(ref) and ref
    for k, g in ref.items():
        scale = g.abs().max().item() + 1e-12
        assert torch.allclose(got[2]["grads"][k], g, rtol=1e-4, atol=1e-5 * scale), k
