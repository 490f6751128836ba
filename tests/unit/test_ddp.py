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
