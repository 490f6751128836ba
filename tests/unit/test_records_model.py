"""The model-side stage records (flows/records_model.py): what an evaluation's key reads."""
from __future__ import annotations

from flows.config import key_of
from flows.records_model import evaluation_reads


def test_two_runs_with_equal_exports_but_other_predictors_are_two_evaluations_when_probed(tmp_path):
    # towers frozen: the export equals the base's, only the training checkpoint (the predictors) differs; the
    # reconstruction probe reads the checkpoint, so with the probes the keys differ, without them they are one
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    a.write_bytes(b"predictors of run a")
    b.write_bytes(b"predictors of run b")
    run_a = {"content_hash": "same-export", "checkpoint": str(a)}
    run_b = {"content_hash": "same-export", "checkpoint": str(b)}
    probed = [key_of(evaluation_reads(r, "roots", ["tables"], probes=True)) for r in (run_a, run_b)]
    plain = [key_of(evaluation_reads(r, "roots", ["tables"], probes=False)) for r in (run_a, run_b)]
    assert probed[0] != probed[1]
    assert plain[0] == plain[1]
    # a run without a training checkpoint (a pretrained model evaluated as is) reads its export alone
    assert evaluation_reads({"content_hash": "x"}, "roots", [], probes=True) == ["x", "roots"]
