"""flows/records_data.py: the data stages' input checks, as the verbs run them."""
from __future__ import annotations

from PIL import Image

from macco.cli import main
from tests_support import one_line_error


def test_annotations_backend_on_captions_that_are_not_coco_refuses(world, tmp_path, capsys):
    """Today: exit 0, 0 regions, every phrase a no_box row."""
    Image.new("RGB", (40, 30)).save(tmp_path / "a.png")
    (tmp_path / "d.tsv").write_text("filepath\ttitle\na.png\ta red circle left of a blue square\n")
    assert main(["captions", str(tmp_path / "d.tsv"), "--source", "csv", "--out", str(tmp_path / "T")]) == 0
    assert main(["parse", str(tmp_path / "T" / "captions"), "--out", str(tmp_path / "T"),
                 "--model", "macco-micro"]) == 0
    capsys.readouterr()
    assert main(["ground", str(tmp_path / "T"), "--images", str(tmp_path), "--instances", str(world)]) == 2
    assert "annotations backend reads COCO instance boxes" in one_line_error(capsys, "ground")
    assert not (tmp_path / "T" / "ground").exists()


def test_the_world_stage_hands_and_keys_the_registrys_world_sets(monkeypatch):
    """The world's benchmark sets are the registry's declaration (``world_sets``): the world stage's record hands
    them to the generator and keys the world on them (one more benchmark given a set is a new world)."""
    import dataclasses

    from flows.registry import BY_NAME
    from flows.stage import stage_key
    from model.benchmarks import registry
    from pipeline.world import WorldConfig

    world, cfg = BY_NAME["world"], WorldConfig()
    assert world.extras(cfg) == [registry.world_sets()]
    assert world.extras(dataclasses.replace(cfg, benchmarks=False)) == [None]
    key = stage_key(world, [], cfg)
    declared = registry.world_sets()
    monkeypatch.setattr(registry, "world_sets", lambda: {**declared, "flickr-order": "aro"})
    assert stage_key(world, [], cfg) != key
