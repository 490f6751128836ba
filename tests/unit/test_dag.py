"""The preprocessing DAG as data (``flows.dag``): wiring by name, the content key, the one "already done" rule,
and the flow file loading the way a deployment's worker loads it."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from flows.config import STAGES, load_config
from flows.dag import BY_NAME, PREPROCESSING, stage_done, stage_key, write_stage

REPO = Path(__file__).resolve().parents[2]


def test_stages_are_wired_by_name_in_flow_order():
    names = [s.name for s in PREPROCESSING]
    assert names == [s for s in STAGES if s in names] and len(set(names)) == len(names)
    for i, stage in enumerate(PREPROCESSING):
        assert all(n == "source" or n in names[:i] for n in stage.inputs), stage.name
        assert (stage.shards is None) == (stage.run_shard is None), stage.name
    assert {s.name for s in PREPROCESSING if s.shards} == {"parse", "ground"}


def test_stage_key_covers_inputs_section_code_and_weights(tmp_path):
    cfg = load_config(REPO / "configs" / "demo.yaml")
    ground = BY_NAME["ground"]
    m = {"captions": {"content_hash": "c"}, "parse": {"content_hash": "p"}, "source": {"content_hash": "s"}}
    key = stage_key(ground, m, cfg)
    assert stage_key(ground, m, cfg) == key  # deterministic
    assert stage_key(ground, {**m, "source": {"content_hash": "s2"}}, cfg) != key  # new images
    assert stage_key(ground, m, {**cfg, "ground": {**cfg["ground"], "box_threshold": 0.3}}) != key
    assert stage_key(ground, m, {**cfg, "ground": {**cfg["ground"], "backend": "hf"}}) != key  # other code
    weights = tmp_path / "w.pth"
    weights.write_bytes(b"1")
    with_w = {**cfg, "ground": {**cfg["ground"], "checkpoint": str(weights)}}
    k1 = stage_key(ground, m, with_w)
    weights.write_bytes(b"2")  # same path, new content
    assert stage_key(ground, m, with_w) != k1
    other_code = dataclasses.replace(ground, code=lambda section: ("flows.dag",))
    assert stage_key(other_code, m, cfg) != key


def test_done_means_manifest_and_every_listed_table_and_file(tmp_path):
    out = tmp_path / "s"
    out.mkdir()
    assert not stage_done(out)
    (out / "f.txt").write_text("x")
    write_stage(out, {"files": [str(out / "f.txt")], "tables": {}})
    assert stage_done(out)
    (out / "f.txt").unlink()
    assert not stage_done(out)  # a file it lists is gone: not done
    write_stage(out, {"tables": {"captions": {"dir": str(out / "captions")}}})
    assert not stage_done(out)  # a table it lists is not complete
    assert json.loads((out / "stage.json").read_text())["tables"]


def test_flow_file_loads_as_a_deployment_worker_loads_it():
    """A worker loads ``flows/pipeline.py`` by path (Prefect's ``load_script_as_module``); a module of flows/ named
    like one in pipeline/ (flows/stages.py next to pipeline/stages.py) broke that import while the package import
    in tests worked."""
    from prefect.utilities.importtools import load_script_as_module

    module = load_script_as_module(str(REPO / "flows" / "pipeline.py"))
    assert module.macco_pipeline.name == "macco"
    clash = {p.stem for p in (REPO / "flows").glob("*.py")} & {p.stem for p in (REPO / "pipeline").glob("*.py")}
    assert clash <= {"__init__"}, clash


def test_the_validate_key_covers_every_stages_errors_table():
    """The stages' content hashes cover their data tables only; the gate checks their errors tables too, so a
    change in error rows alone must not reuse an earlier validation."""
    from flows.catalog import ERROR_STAGES, Catalog
    from flows.nodes import Plan, _validate

    def key_with(errors_hash: str) -> str:
        manifests = {s: {"content_hash": f"data-{s}", "tables": {
            "errors": {"dir": f"/e/{s}", "content_hash": errors_hash if s == "parse" else f"err-{s}"},
            **{t: {"dir": f"/t/{t}"} for t in ("captions", "scene_graphs", "token_masks", "regions",
                                                "patch_masks")}}} for s in ERROR_STAGES}
        seen = {}

        class Runner:
            def dir(self, stage, key):
                return Path("/v") / key

            def call(self, stage, task, out, key, **kw):
                seen["key"] = key

        _validate(Plan({"validate": {"params": {}}}, Runner(), Catalog(manifests)))
        return seen["key"]

    assert key_with("a") == key_with("a") and key_with("a") != key_with("b")
