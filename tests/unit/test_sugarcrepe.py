"""model/benchmarks/sugarcrepe.py: the real SugarCrepe files read with their counts."""
from model.benchmarks import sugarcrepe
from tests_support import SHARED, needs_shared


@needs_shared("benchmarks/sugar_crepe")
def test_real_sugarcrepe_files():
    cases = sugarcrepe.load(SHARED / "benchmarks" / "sugar_crepe")
    counts = {s: sum(c.subset == s for c in cases) for s in sugarcrepe.SUBSETS}
    assert counts == {"add_att": 692, "add_obj": 2062, "replace_att": 788, "replace_obj": 1652, "replace_rel": 1406,
                      "swap_att": 666, "swap_obj": 245}
    assert len(cases) == 7511
    ids = {c.meta["id"] for c in cases if c.subset == "swap_obj"}
    assert "108" not in ids and "109" in ids
    assert all(c.true_index == 1 and c.image.endswith(".jpg") and "val2017" in c.image for c in cases)
