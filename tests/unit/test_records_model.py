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


def test_each_run_gets_the_tables_the_source_gives_that_it_trains_on():
    """A negclip-tsv source's negative_captions go to the negclip-style runs, its image_neighbours to the runs with
    neg_images; every run gets the training tables; the train stage reads both (optional) into its key."""
    from types import SimpleNamespace

    from flows.catalog import Catalog
    from flows.config import train_plan
    from flows.records_model import STAGES, TRAINING_TABLES, _drive_train
    from flows.runner import Plan

    names = (*TRAINING_TABLES, "negative_captions", "image_neighbours")
    cat = Catalog({**{n: {"kind": "table", "dir": f"/t/{n}", "content_hash": n} for n in names},
                   "images": {"kind": "images", "dir": "/images", "content_hash": "i"}})
    plan = Plan(SimpleNamespace(train=train_plan({"runs": {
        "ft": {"mode": "clip-ft"}, "neg": {"mode": "negclip"}, "nn": {"mode": "macco+negclip", "neg_images": True},
        "ce": {"mode": "ce-clip"}}})), cat)
    got = {}

    class Runner:
        def run(self, stage, section, inputs, *, read_hashes, label, extra):
            got[label] = sorted(section.tables)
            assert read_hashes == [*TRAINING_TABLES, "negative_captions", "image_neighbours", "i"]
            return {"content_hash": label, "export_pt": None}

    train = next(s for s in STAGES if s.name == "train")
    _drive_train(train, plan, Runner())
    base = sorted(TRAINING_TABLES)
    assert got == {"ft-s0": base, "ce-s0": base, "neg-s0": sorted([*base, "negative_captions"]),
                   "nn-s0": sorted([*base, "negative_captions", "image_neighbours"])}
