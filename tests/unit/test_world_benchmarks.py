"""pipeline/world_benchmarks.py: every synthetic benchmark set of the world reads back with its counts."""
import json

from model.benchmarks import aro, sugarcrepe, valse, vlchecklist, whatsup


def test_every_synthetic_set_reads_back_with_its_counts(world):
    from pipeline.world_benchmarks import benchmark_roots

    counts = json.loads((world / "benchmarks" / "benchmarks.json").read_text())["counts"]
    roots = benchmark_roots(world)
    assert len(aro.load_vg(roots["aro-vgr"], "relation")) == counts["aro-vgr"]
    assert len(aro.load_vg(roots["aro-vga"], "attribution")) == counts["aro-vga"]
    order = aro.load_order(f"{roots['coco-order']}/coco_karpathy_test.json", roots["coco-order"], "coco-order")
    assert len(order) == counts["coco-order"] and all(len(c.options) == 5 for c in order)
    sc = sugarcrepe.load(roots["sugarcrepe"])
    assert {s: sum(c.subset == s for c in sc) for s in sugarcrepe.SUBSETS} == \
        {s: counts[f"sugarcrepe/{s}"] for s in sugarcrepe.SUBSETS}
    vc = vlchecklist.load(roots["vl-checklist"])
    assert {c.group for c in vc} == {"A-color", "A-size", "R-spatial", "O-center"}
    assert all("/vg/" in c.image for c in vc)
    va = valse.load(roots["valse"])
    assert {c.subset for c in va} == {"relations", "counting-hard", "existence"}
    wu = whatsup.load(roots["whatsup"])
    assert all(len(c.options) == 4 and c.true_index == 0 and "/controlled_images/" in c.image for c in wu)
    for c in sc + vc + va + wu + order:
        assert __import__("os").path.exists(c.image), c.image


def test_the_world_writes_the_sets_its_benchmark_records_declare(world):
    """Which benchmark reads which world set is its registry record's ``world``; the world's benchmarks.json is
    that declaration (no second list in pipeline/), and every declared set has its writer."""
    from model.benchmarks.registry import REGISTRY, world_sets
    from pipeline.world_benchmarks import WRITERS

    sets = world_sets()
    assert sets == {b.name: b.world for b in REGISTRY.values() if b.world}
    assert set(sets.values()) <= set(WRITERS)
    assert json.loads((world / "benchmarks" / "benchmarks.json").read_text())["roots"] == sets


def test_a_new_benchmark_with_a_world_set_needs_no_list_here(world, tmp_path):
    """A benchmark the registry gives a set reaches the writer by that name; an unknown set is refused naming it."""
    import pytest

    from pipeline.world_benchmarks import write_benchmarks

    out = write_benchmarks(world, {"my-spatial-bench": "whatsup"}, tmp_path / "b", seed=0)
    assert out["roots"] == {"my-spatial-bench": str(tmp_path / "b" / "whatsup")}
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["benchmarks.json", "whatsup"]
    assert len(whatsup.load(tmp_path / "b" / "whatsup")) == out["counts"]["whatsup/controlled_a"]
    with pytest.raises(ValueError, match=r"\['no-such-set'\]"):
        write_benchmarks(world, {"x": "no-such-set"}, tmp_path / "c")
    assert not (tmp_path / "c").exists()
