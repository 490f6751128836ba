"""flows/registry.py and flows/stage.py: the stages ordered from what they read and write, and one key function
whose code part is the import closure of each stage's code roots — so a changed byte in any module a stage runs
changes its key (and, through its output, the keys downstream) and nothing else; no module list kept by hand."""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from data_schemas import provenance
from data_schemas.provenance import module_closure
from flows.config import key_of, load_config
from flows.registry import BY_NAME, ORDER, STAGES, topological
from flows.stage import Stage, code_roots, roots, stage_key
from tests_support import downstream_of, section_of, simulated_keys

REPO = Path(__file__).resolve().parents[2]


def test_the_order_follows_what_each_stage_reads_and_writes():
    assert STAGES == ("world", "captions", "tokenizer", "parse", "ground", "masks", "validate", "train", "evaluate",
                      "report")
    written = {"source"}  # the user's data, when there is no world stage
    for stage in ORDER:
        for name in (*stage.reads, *stage.after):
            assert name.endswith("?") or name in written, (stage.name, name)
        written |= set(stage.writes)
    for seed in range(5):  # any declaration order gives an order that respects every read
        shuffled = list(ORDER)
        random.Random(seed).shuffle(shuffled)
        order = [s.name for s in topological(tuple(shuffled))]
        for stage in ORDER:
            for name in (*stage.reads, *stage.after):
                for writer in (s for s in ORDER if name.rstrip("?") in s.writes and s is not stage):
                    assert order.index(writer.name) < order.index(stage.name), (writer.name, stage.name)
    a = Stage("a", "world", ("y",), ("x",), roots("pipeline.world"), lambda call: {})
    b = Stage("b", "world", ("x",), ("y",), roots("pipeline.world"), lambda call: {})
    with pytest.raises(ValueError, match="cycle"):
        topological((a, b))


def test_no_module_list_is_kept_by_hand_and_every_code_root_exists():
    """The code a key covers is the import closure of the stage's roots; the old hand-kept lists are gone."""
    import importlib.util

    pattern = re.compile(r"CODE_MODULES|[A-Z]+_CODE\s*=|def code_modules|HARNESS_MODULES|ground_code_modules")
    for path in [*REPO.glob("*/*.py"), *REPO.glob("*/*/*.py")]:
        if path.parts[len(REPO.parts)] in ("flows", "pipeline", "model", "data_schemas", "macco"):
            assert not pattern.search(path.read_text()), path
    cfg = load_config(REPO / "configs" / "demo.yaml")
    for stage in ORDER:
        for root in stage.code(section_of(stage, cfg)):
            assert importlib.util.find_spec(root) is not None, (stage.name, root)


@pytest.mark.parametrize("config", ["demo.yaml", "coco-vitb32.yaml"])
def test_a_byte_changed_in_any_module_changes_the_keys_of_the_stages_running_it_and_downstream_only(
        config, monkeypatch):
    cfg = load_config(REPO / "configs" / config)
    closures = {s.name: set(module_closure(*code_roots(s, section_of(s, cfg)))) for s in ORDER}
    paths = {m: provenance.module_path(m) for c in closures.values() for m in c}
    real, changed = provenance.source_bytes, {"path": None}
    monkeypatch.setattr(provenance, "source_bytes", lambda path: real(path) + (
        b"\n# one more line\n" if path == changed["path"] else b""))
    base = simulated_keys(cfg)
    assert len(set(base.values())) == len(base)
    for module in sorted(paths):
        changed["path"] = paths[module]
        keys = simulated_keys(cfg)
        running = {n for n, c in closures.items() if module in c}
        assert {n for n in keys if keys[n] != base[n]} == downstream_of(running), module


def test_a_stages_own_code_never_keys_a_stage_before_it():
    """Editing the parse rules never invalidates the captions, nor the checks the world: a stage's code roots are
    in no import closure of the stages upstream of it."""
    cfg = load_config(REPO / "configs" / "demo.yaml")
    for stage in ORDER:
        upstream = {s.name for s in ORDER} - downstream_of({stage.name})
        own = set(stage.code(section_of(stage, cfg)))
        for name in upstream:
            other = BY_NAME[name]
            assert not own & set(module_closure(*other.code(section_of(other, cfg)))), (stage.name, name)


def test_the_key_covers_reads_section_code_and_declared_extras(tmp_path):
    import dataclasses

    cfg = load_config(REPO / "configs" / "demo.yaml")
    ground = BY_NAME["ground"]
    key = stage_key(ground, ["c", "p", "i", None], cfg.ground)
    assert stage_key(ground, ["c", "p", "i", None], cfg.ground) == key  # deterministic
    assert stage_key(ground, ["c", "p", "i2", None], cfg.ground) != key  # new images
    assert stage_key(ground, ["c", "p", "i", None], dataclasses.replace(cfg.ground, box_threshold=0.3)) != key
    assert stage_key(ground, ["c", "p", "i", None], dataclasses.replace(cfg.ground, backend="hf")) != key  # code
    weights = tmp_path / "w.pth"
    weights.write_bytes(b"1")
    with_w = dataclasses.replace(cfg.ground, checkpoint=str(weights))
    k1 = stage_key(ground, ["c", "p", "i", None], with_w)
    weights.write_bytes(b"2")  # same path, new content
    assert stage_key(ground, ["c", "p", "i", None], with_w) != k1
    train = BY_NAME["train"]
    run = cfg.train.runs["macco"].config
    k = stage_key(train, ["t"], run)
    assert stage_key(train, ["t"], dataclasses.replace(run, out_dir="elsewhere", save_every=5, tables={"x": 1})) == k
    assert stage_key(train, ["t"], dataclasses.replace(run, lr_clip=1e-5)) != k


def test_every_deployment_names_registry_stages():
    """prefect.yaml is written by hand: each deployment's stages and force are names of the registry's stages."""
    import yaml

    for d in yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]:
        params = d.get("parameters", {})
        for name in [*params.get("stages", []), *params.get("force", [])]:
            assert name in STAGES, (d["name"], name)


def stage_names_in(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string in ``path``'s code (docstrings aside) that is a stage's name or begins with one
    as a word (``"train-..."``, ``"report/..."``): a stage named outside its record."""
    import ast

    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    word = re.compile(rf"^({'|'.join(STAGES)})(\W|$)")
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs and word.match(n.value)]


@pytest.mark.parametrize("module", ["flows/runner.py", "flows/tasks.py"])
def test_the_runner_and_the_tasks_name_no_stage(module):
    """What is particular to a stage (its folder, a read the config gives, what it feeds the later stages, what it
    shows beside its work) is a hook on its record: the runner and the tasks work for any stage."""
    assert stage_names_in(REPO / module) == []


def test_a_stage_named_in_code_is_found(tmp_path):
    """The check above finds a stage branch (a docstring may name stages)."""
    src = tmp_path / "m.py"
    src.write_text('"""train, then report."""\ndef f(stage):\n    """evaluate"""\n'
                   '    return stage.name == "train" or f"report-{stage}"\n')
    assert stage_names_in(src) == [(4, "train"), (4, "report-")]


def test_the_config_sections_are_the_registrys():
    """FlowConfig's stage sections, its defaults and what load_config reads are the records' sections, in the
    registry's order, each of its record's config type; a section out of order or of another type is refused."""
    import dataclasses

    from flows.config import DEFAULTS, FLOW_OWN, FLOW_SECTIONS, sections
    from flows.registry import check_sections

    declared = sections()
    stage_sections = list(dict.fromkeys(s.section for s in ORDER))
    assert [k for k in declared if k not in FLOW_SECTIONS] == stage_sections
    assert list(DEFAULTS) == [*FLOW_OWN, *declared]
    cfg = load_config(None)
    for stage in ORDER:
        assert isinstance(getattr(cfg, stage.section), stage.config), stage.name
    swapped = dict(reversed(list(declared.items())))
    with pytest.raises(ValueError, match="not the registry's"):
        check_sections(ORDER, swapped)
    wrong = (dataclasses.replace(ORDER[0], config=dict), *ORDER[1:])
    with pytest.raises(ValueError, match=f"stage {ORDER[0].name}: its config dict"):
        check_sections(wrong, declared)
