"""flows/stage.py: the one key (``stage_key``) covers what decides a stage's output and nothing else: the data files
its code reads, its record's module, the packages it calls, a user's benchmark files; never a field flagged
``unkeyed`` (where and how the work runs); a schema edit re-keys only the stages using that table."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

from tests_support import downstream_of, section_of, simulated_keys

import flows.stage
from data_schemas import provenance
from flows.catalog import Catalog
from flows.config import EvaluatePlan, load_config
from flows.records_model import benchmark_roots, evaluation_reads
from flows.registry import BY_NAME

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "demo.yaml"


def rekeyed_by(monkeypatch, path: Path) -> set[str]:
    """The stages whose key (on a simulated run, a changed stage writing changed content) changes when one byte is
    added to the repository file ``path``."""
    cfg = load_config(DEMO)
    base = simulated_keys(cfg)
    real = provenance.source_bytes
    monkeypatch.setattr(provenance, "source_bytes", lambda p: real(p) + (b" " if p == path else b""))
    new = simulated_keys(cfg)
    return {name for name in base if new[name] != base[name]}


def test_a_changed_model_config_json_reruns_train_and_everything_after(monkeypatch):
    assert rekeyed_by(monkeypatch, REPO / "model" / "configs" / "macco-tiny.json") == {"train", "evaluate", "report"}


def test_a_changed_exclusion_list_reruns_evaluate_and_its_report(monkeypatch):
    excluded = REPO / "model" / "benchmarks" / "data" / "aro_vg_relation_excluded.json"
    assert rekeyed_by(monkeypatch, excluded) == {"evaluate", "report"}


def test_a_changed_history_schema_rekeys_only_evaluate_and_report(monkeypatch):
    """``data_schemas/__init__.py`` imports no schema: the eval_results schema is in evaluate's code alone."""
    assert rekeyed_by(monkeypatch, REPO / "data_schemas" / "eval_results.py") == {"evaluate", "report"}
    # a table's schema: the stages writing or reading that table (and, through their output, the ones after)
    assert rekeyed_by(monkeypatch, REPO / "data_schemas" / "patch_masks.py") == downstream_of({"masks"})


def test_the_records_module_and_the_packages_it_calls_are_in_the_key(monkeypatch):
    assert rekeyed_by(monkeypatch, REPO / "flows" / "records_model.py") == {"validate", "train", "evaluate", "report"}
    cfg = load_config(DEMO)
    base = simulated_keys(cfg)
    real = flows.stage.package_versions
    monkeypatch.setattr(flows.stage, "package_versions",
                        lambda names: [(n, "9.9" if n == "spacy" else v) for n, v in real(names)])
    new = simulated_keys(cfg)
    # spaCy: the parser and the Order benchmarks' perturbations
    assert {n for n in base if new[n] != base[n]} == downstream_of({"parse", "evaluate"})


def test_a_setting_that_does_not_decide_the_output_reruns_nothing():
    """workers, log_every, device, paths, shard and batch sizes of inference: one flag, read by the key, the
    resume check (checkpoint.checkpoint_to_resume) and the shard fingerprint alike."""
    from data_schemas.config import keyed_fields
    from model.train_config import TrainConfig

    cfg = load_config(DEMO)
    cases = {"train": dict(workers=7, log_every=3, device="cuda", out_dir="x", save_every=9, progress=False),
             "ground": dict(device="cuda", batch_size=3, shard_size=7),
             "parse": dict(n_process=4, batch_size=3, shard_size=7)}
    for name, changes in cases.items():
        stage = BY_NAME[name]
        section = section_of(stage, cfg)
        assert flows.stage.stage_key(stage, ["r"], dataclasses.replace(section, **changes)) == \
            flows.stage.stage_key(stage, ["r"], section), name
    evaluate = BY_NAME["evaluate"]
    moved = dataclasses.replace(cfg.evaluate, settings=dataclasses.replace(cfg.evaluate.settings, device="cuda"))
    assert flows.stage.stage_key(evaluate, ["r"], moved) == flows.stage.stage_key(evaluate, ["r"], cfg.evaluate)
    # what decides the output still does
    run = section_of(BY_NAME["train"], cfg)
    assert flows.stage.stage_key(BY_NAME["train"], ["r"], dataclasses.replace(run, batch_size=4)) != \
        flows.stage.stage_key(BY_NAME["train"], ["r"], run)
    assert {"workers", "log_every", "device", "tables", "out_dir"}.isdisjoint(keyed_fields(TrainConfig))


def test_the_shard_fingerprint_reads_the_same_flag(tmp_path):
    """A ground run moved to another device or batch size keeps its finished shards; another threshold does not."""
    from pipeline.grounding.base import GroundingConfig
    from pipeline.shards import run_sharded

    calls: list = []

    def shard(items):
        calls.append(items)
        return {}

    def run(cfg):
        run_sharded([1, 2, 3], 2, {"errors": tmp_path / "errors"}, shard, config=cfg, version="v", only=[0],
                    finalize=False)

    cfg = GroundingConfig()
    run(cfg)
    run(dataclasses.replace(cfg, device="cuda", batch_size=1, shard_size=9))
    assert len(calls) == 1
    run(dataclasses.replace(cfg, box_threshold=0.5))
    assert len(calls) == 2


def test_a_changed_benchmark_file_in_a_user_root_reruns_evaluate(tmp_path):
    root = tmp_path / "aro"
    (root / "images").mkdir(parents=True)
    (root / "visual_genome_relation.json").write_text('[{"relation": "on"}]')
    (root / "images" / "1.jpg").write_bytes(b"jpeg")
    plan = SimpleNamespace(cfg=SimpleNamespace(evaluate=EvaluatePlan(roots={"aro-vgr": str(root)}), world_run=False),
                           catalog=Catalog())
    stage, run = BY_NAME["evaluate"], {"content_hash": "weights"}

    def key() -> str:
        _, content = benchmark_roots(plan)
        return flows.stage.stage_key(stage, evaluation_reads(run, content, [], False), plan.cfg.evaluate)

    before = key()
    assert key() == before
    (root / "visual_genome_relation.json").write_text('[{"relation": "in"}]')  # same size, corrected content
    assert key() != before
