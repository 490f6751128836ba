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
