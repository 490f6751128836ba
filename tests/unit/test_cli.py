import subprocess
import sys

import pytest

from macco.cli import build_parser, main

VERBS = ["world", "parse", "ground", "masks", "validate", "train", "eval", "probe", "run", "inspect", "show-masks",
         "sql", "report", "captions"]


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help(verb, capsys):
    with pytest.raises(SystemExit) as e:
        main([verb, "--help"])
    assert e.value.code == 0
    assert "usage: macco " + verb in capsys.readouterr().out


def test_parser_lists_every_verb():
    sub = next(a for a in build_parser()._actions if a.dest == "verb")
    assert set(VERBS) <= set(sub.choices)


def test_world_validate_inspect_roundtrip(tmp_path, capsys):
    assert main(["world", "--out", str(tmp_path / "w"), "--images", "6", "--seed", "1"]) == 0
    assert (tmp_path / "w" / "annotations" / "captions_train2014.json").exists()
    assert main(["world", "--root", str(tmp_path / "w"), "--preview", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").exists()


def test_console_script_and_model_imports_light():
    """The model package imports without spacy, prefect or duckdb, and its training modules without open_clip
    (seconds of import time for every CLI start, e.g. a cached flow rerun; it is imported where a model is built)."""
    code = ("import sys\n"
            "import model, model.task, model.train\n"
            "bad = [m for m in ('spacy', 'prefect', 'duckdb', 'open_clip') if m in sys.modules]\n"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_imports_point_one_way():
    """flows -> pipeline/model -> data_schemas; prefect only in flows; pipeline and model never import each other."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    banned = {"data_schemas": {"pipeline", "model", "flows", "macco", "prefect", "torch", "spacy"},
              "pipeline": {"model", "flows", "macco", "prefect"},
              "model": {"pipeline", "flows", "macco", "prefect"}}
    # the model package may use spacy (ARO's Order perturbations) and duckdb only inside functions
    lazy_only = {"model": {"spacy", "duckdb"}}
    bad = []
    for pkg, forbidden in banned.items():
        for f in (root / pkg).rglob("*.py"):
            tree = ast.parse(f.read_text())
            for node in tree.body:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
                bad += [f"{f.relative_to(root)}: top-level {n}" for n in names
                        if n.split(".")[0] in lazy_only.get(pkg, set())]
            for node in ast.walk(tree):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
                bad += [f"{f.relative_to(root)}: {n}" for n in names if n.split(".")[0] in forbidden]
    assert not bad, bad


def test_probe_verb_writes_its_json_and_checks_its_arguments(world, tmp_path, capsys):
    import json

    out = tmp_path / "probes.json"
    assert main(["probe", "--model", "macco-micro", "--world", str(world), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert {"image_global", "image_patches", "text", "retrieval", "zeroshot_top1"} <= set(res)
    assert "| text: relation direction % | 50 |" in capsys.readouterr().out
    assert main(["probe", "--model", "macco-micro", "--world", str(world), "--train-checkpoint",
                 str(tmp_path / "x.pt")]) == 2
    assert "--train-checkpoint needs --tables" in capsys.readouterr().err
    assert main(["probe", "--model", "macco-micro", "--world", str(tmp_path)]) == 2  # one line, no traceback
    assert "not a synthetic world root" in capsys.readouterr().err
