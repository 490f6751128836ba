"""pipeline/lineage.py: tables know what they were made from — the verbs read one run's tables (not the newest of
each name), say so when a root holds several, and refuse tables made from an input that changed since (a world
regenerated into the same folder, captions rewritten under their scene graphs)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from macco.cli import main
from tests_support import strict_one_line_error


def world(path: Path, seed: int) -> Path:
    from pipeline.world import WorldConfig, generate_world

    generate_world(path, WorldConfig(seed=seed, images=6, size=32, eval_fraction=0.5, benchmarks=False))
    return path


def captions(w: Path, out: Path) -> None:
    assert main(["captions", str(w), "--out", str(out)]) == 0


def parse(out: Path) -> None:
    assert main(["parse", str(out / "captions"), "--out", str(out), "--n-process", "1"]) == 0


def test_a_root_of_two_runs_is_read_as_one_run_not_the_newest_table_of_each_name(tmp_path, capsys):
    """#47: captions from one folder and scene_graphs from another (each the newest of its name): validate reported
    broken references instead of saying the tables belong to different runs."""
    a, b = tmp_path / "root" / "a", tmp_path / "root" / "b"
    captions(world(tmp_path / "wa", 1), a)
    captions(world(tmp_path / "wb", 2), b)  # the newest captions
    parse(b)
    parse(a)  # the newest scene graphs: made from a's captions
    capsys.readouterr()
    assert main(["validate", str(tmp_path / "root")]) == 0, capsys.readouterr()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds 2 runs" in err
    assert "using the newest, a; --run FOLDER picks another: b" in err
    assert main(["sql", "select count(*) n from captions", "--root", str(tmp_path / "root"), "--run", "b",
                 "--json"]) == 0
    cap = capsys.readouterr()
    from data_schemas import read_manifest

    assert json.loads(cap.out) == [{"n": read_manifest(b / "captions")["rows"]}] and cap.err == ""
    assert read_manifest(a / "scene_graphs")["inputs"] == {"captions": read_manifest(a / "captions")["content_hash"]}


def test_captions_rewritten_under_their_scene_graphs_are_refused_naming_both(tmp_path, capsys):
    """#47: `macco captions` again into the same folder from another world, parse not rerun: the old scene graphs
    were checked against the new captions (passing where the ids happen to match)."""
    t = tmp_path / "T"
    captions(world(tmp_path / "w1", 1), t)
    parse(t)
    captions(world(tmp_path / "w2", 2), t)
    capsys.readouterr()
    assert main(["validate", str(t)]) == 2
    err = strict_one_line_error(capsys, "validate")
    assert f"{t / 'scene_graphs'} was made from captions " in err and f"but {t / 'captions'} is " in err


@pytest.mark.parametrize("verb", ["show-masks", "ground"])
def test_a_world_regenerated_under_its_tables_is_refused_naming_both(tmp_path, capsys, verb):
    """#47: `macco world` again into the same --out with another seed, then show-masks drew the old caption on the
    new image (exit 0) and ground found no box for most phrases (exit 0): nothing recorded the captions' world."""
    w, t = tmp_path / "w", tmp_path / "T"
    assert main(["world", "--out", str(w), "--images", "6", "--size", "32", "--eval-fraction", "0.5"]) == 0
    captions(w, t)
    parse(t)
    assert main(["world", "--out", str(w), "--images", "6", "--size", "32", "--eval-fraction", "0.5",
                 "--seed", "5"]) == 0
    capsys.readouterr()
    args = ["show-masks", str(t), "--images", str(w), "--caption-id", "1", "--out", str(tmp_path / "m.png")] \
        if verb == "show-masks" else ["ground", str(t), "--images", str(w), "--instances", str(w)]
    assert main(args) == 2
    err = strict_one_line_error(capsys, verb)
    assert f"{t / 'captions'} was made from the world in {w} as it was" in err and "seed 5: regenerated" in err
    assert not (tmp_path / "m.png").exists() and not (t / "ground").exists()
