"""model/neighbours.py: NegCLIP's hard-negative images, each image's k nearest neighbours by the base model's image
embedding, written as the image_neighbours table (checked by its DuckDB checks)."""
import pytest
import torch

from data_schemas import TABLES, read_table
from model.neighbours import NeighboursConfig, image_neighbours, nearest_neighbours, split_images, \
    write_image_neighbours
from tests_support import micro_clip  # noqa: F401 (fixture)


def test_nearest_neighbours_by_cosine_without_itself():
    f = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [2.0, 0.0]])  # row 4: row 0 scaled
    order, sim = nearest_neighbours(f, 2)
    assert order.tolist() == [[4, 1], [0, 4], [3, 1], [2, 1], [0, 1]]  # 0 and 4 tie for row 1: the lower row first
    assert sim[0, 0] == pytest.approx(1.0) and sim[2, 0] == pytest.approx(0.9 / 0.82 ** 0.5)
    assert (sim[:, 0] >= sim[:, 1]).all()
    assert nearest_neighbours(f[:2], 3)[0].tolist() == [[1], [0]]  # k cut to N - 1
    with pytest.raises(ValueError, match=r"\[N, D\] expected"):
        nearest_neighbours(f[0], 1)


def test_blocks_give_the_dense_result_ties_included():
    g = torch.Generator().manual_seed(0)
    f = torch.randn(50, 8, generator=g)
    f[10:20] = f[0]  # eleven equal rows: ties broken by row
    dense = torch.nn.functional.normalize(f.double(), dim=-1) @ torch.nn.functional.normalize(f.double(), dim=-1).T
    dense.fill_diagonal_(float("-inf"))
    want = torch.sort(dense, dim=1, descending=True, stable=True).indices[:, :4]
    for block in (1, 7, 64):
        order, sim = nearest_neighbours(f, 4, rows_per_block=block)
        assert torch.equal(order, want), block
        assert torch.allclose(sim.double(), torch.gather(dense, 1, want), atol=1e-6)
    assert nearest_neighbours(f, 4)[0][0].tolist() == [10, 11, 12, 13]


def test_the_worlds_neighbours_by_the_base_model_become_a_checked_table(world, world_tables, micro_clip, tmp_path):
    from data_schemas.checks import run_checks

    caps = read_table(TABLES["captions"], world_tables["captions"]).to_pylist()
    ids, files = split_images(caps, "train")
    rows = image_neighbours(NeighboursConfig(arch="macco-micro", k=3), caps, world, model=micro_clip)
    assert len(rows) == 3 * len(ids) and {r["image_id"] for r in rows} == set(ids)
    assert all(r["neighbour_image_id"] != r["image_id"] and r["caption_id"] is None for r in rows)
    again = image_neighbours(NeighboursConfig(arch="macco-micro", k=3), caps, world, model=micro_clip)
    assert again == rows  # computed once per data set and base: the same rows every time
    assert micro_clip.training  # the model's mode is restored
    write_image_neighbours(rows, tmp_path / "image_neighbours")
    back = read_table(TABLES["image_neighbours"], tmp_path / "image_neighbours").to_pylist()
    assert [(r["image_id"], r["rank"], r["neighbour_image_id"]) for r in back] == \
        [(r["image_id"], r["rank"], r["neighbour_image_id"]) for r in rows]
    results = run_checks({"image_neighbours": tmp_path / "image_neighbours", "captions": world_tables["captions"]})
    mine = [r for r in results if r.check.startswith("image_neighbours.")]
    assert len(mine) == 5 and all(r.status == "pass" for r in mine), [(r.check, r.status) for r in mine]


def test_a_split_of_one_image_has_no_neighbours_in_one_line(world_tables, micro_clip):
    from data_schemas import InputFileError

    caps = read_table(TABLES["captions"], world_tables["captions"]).to_pylist()[:1]
    with pytest.raises(InputFileError, match="has 1 image"):
        image_neighbours(NeighboursConfig(split=caps[0]["split"]), caps, "/nowhere", model=micro_clip)


def test_a_table_naming_an_image_its_own_neighbour_fails_its_check(world_tables, tmp_path):
    from data_schemas.checks import run_checks

    cap = read_table(TABLES["captions"], world_tables["captions"]).to_pylist()[0]
    write_image_neighbours([{"image_id": cap["image_id"], "caption_id": None, "rank": 0,
                             "neighbour_image_id": cap["image_id"], "neighbour_caption_id": None, "similarity": 1.0}],
                           tmp_path / "n")
    status = {r.check: r.status for r in run_checks({"image_neighbours": tmp_path / "n",
                                                     "captions": world_tables["captions"]})}
    assert status["image_neighbours.not_itself"] == "fail" and status["image_neighbours.image_exists"] == "pass"
