"""model/neighbour_batches.py: NegCLIP's hard-negative images in the batch (``neg_images: true``): half the batch
anchors, each followed by one of its image's neighbours with a caption of it; the same seed gives the same batches,
a resume the uninterrupted run's, each rank its own anchors; and the modes negclip / macco+negclip training on them
through the real training entry."""
import json

import pytest

from data_schemas import TABLES, read_table
from data_schemas.config import ConfigError
from model.data import Sample
from model.neighbour_batches import NeighbourBatchSampler, neighbour_candidates, steps_per_epoch
from model.neighbours import NeighboursConfig, image_neighbours, write_image_neighbours
from model.train import check_tables, load_config, train
from tests_support import micro_clip  # noqa: F401 (fixture)
from tests_support import micro_train_config as _cfg


def _sample(cid):
    return Sample(cid, f"{cid}.png", [], [], [])


def _row(image, rank, near, caption=None, near_caption=None):
    return {"image_id": image, "caption_id": caption, "rank": rank, "neighbour_image_id": near,
            "neighbour_caption_id": near_caption, "similarity": None}


def test_candidates_are_the_neighbours_training_captions_nearest_first():
    # images 10 (captions 0, 1), 20 (2), 30 (3, 4), 40 (5: not a training sample)
    caps = [{"caption_id": c, "image_id": i} for c, i in ((0, 10), (1, 10), (2, 20), (3, 30), (4, 30), (5, 40))]
    samples = [_sample(c) for c in (0, 1, 2, 3, 4)]
    rows = [_row(10, 1, 20), _row(10, 0, 30), _row(20, 0, 40),  # image 20's only neighbour is not trained on
            _row(30, 0, 10, caption=3, near_caption=1),  # caption 3's own row (NegCLIP's file): caption 1 as given
            _row(30, 0, 20)]  # caption 4: the image's rows
    cands, counts = neighbour_candidates(samples, caps, rows)
    assert cands[0] == cands[1] == [[3, 4], [2]]  # every caption of image 30, then of image 20
    assert cands[2] == [] and cands[3] == [[1]] and cands[4] == [[2]]
    assert counts == {"anchors": 5, "with_neighbour": 4, "without_neighbour": 1}


def _sampler(cands, bs=4, start=0, total=6, rank=0, world=1, seed=3):
    return NeighbourBatchSampler(cands, bs, seed, start, total, rank, world)


def test_each_anchor_is_followed_by_a_neighbour_deterministically():
    n = 20
    cands = [[[(i + 1) % n], [(i + 2) % n, (i + 3) % n]] if i % 5 else [] for i in range(n)]
    batches = list(_sampler(cands))
    assert len(batches) == 6 and all(len(b) == 4 for b in batches)
    assert steps_per_epoch(n, 4, 1, True) == 10 == 2 * steps_per_epoch(n, 4, 1, False)
    for b in batches:
        for (ea, a), (en, m) in zip(b[0::2], b[1::2]):
            assert ea == en and (m in {j for c in cands[a] for j in c} if cands[a] else 0 <= m < n)
    assert batches == list(_sampler(cands))  # same seed, same batches
    assert batches != list(_sampler(cands, seed=4))
    assert list(_sampler(cands, start=2)) == batches[2:]  # a resume continues the same batches
    ranks = [list(_sampler(cands, rank=r, world=2)) for r in (0, 1)]
    for a, b in zip(*ranks):
        assert not {i for _, i in a[0::2]} & {i for _, i in b[0::2]}  # each rank its own anchors
    drawn = {tuple(b[1::2]) for b in list(_sampler(cands, total=200))}
    assert len(drawn) > 1  # the neighbour (and its caption) is drawn, not always the nearest
    with pytest.raises(ValueError, match="batch_size 5 is odd"):
        _sampler(cands, bs=5)


@pytest.fixture(scope="module")
def neighbour_tables(world, world_tables, micro_clip, tmp_path_factory):
    caps = read_table(TABLES["captions"], world_tables["captions"]).to_pylist()
    out = tmp_path_factory.mktemp("neighbours") / "image_neighbours"
    write_image_neighbours(image_neighbours(NeighboursConfig(arch="macco-micro"), caps, world, model=micro_clip), out)
    return {**{k: str(v) for k, v in world_tables.items() if k != "root"}, "image_neighbours": str(out)}


@pytest.mark.parametrize("mode", ["negclip", "macco+negclip"])
def test_negclip_modes_train_with_neighbour_images(mode, world, world_tables, neighbour_tables, tmp_path):
    notes = []
    s = train(_cfg(world, world_tables, tmp_path / "r", mode=mode, neg_images=True, max_steps=2,
                   tables=neighbour_tables), on_note=notes.append)
    assert s["steps"] == 2 and all(h["total_loss"] > 0 for h in s["history"])
    counts = json.loads((tmp_path / "r" / "summary.json").read_text())["samples"]["neighbour_images"]
    assert counts["anchors"] == s["samples"]["captions"] - s["samples"]["no_token_mask"]
    assert counts["with_neighbour"] == counts["anchors"]  # every world image's neighbours are training images
    assert any(f"{counts['with_neighbour']} of {counts['anchors']} anchors" in n for n in notes)


def test_the_run_reads_the_batches_its_sampler_gives(world, world_tables, neighbour_tables, tmp_path):
    """The training loader's batches are the neighbour sampler's: anchors and neighbours of the table."""
    from model.train import setup

    state = setup(_cfg(world, world_tables, tmp_path / "r", mode="negclip", neg_images=True, max_steps=2,
                       tables=neighbour_tables))
    sampler = state.loader.batch_sampler
    assert isinstance(sampler, NeighbourBatchSampler) and sampler.bs == 4  # batch 8: 4 anchors + 4 neighbours
    batch = next(iter(state.loader))
    assert batch["image"].shape[0] == 8


def test_without_a_table_the_run_computes_its_neighbours_once_from_its_starting_weights(world, world_tables,
                                                                                       neighbour_tables, tmp_path):
    """No image_neighbours table given: the run computes them by its starting weights (here macco-micro's seeded
    init, as ``pretrained`` would be the base's export in the flow), keeps them in its folder and reads them back
    on a resume; they are the table ``model.neighbours`` computes for the same weights."""
    import torch

    from model.factory import create_clip, register_model_configs
    from model.neighbour_batches import load_candidates

    register_model_configs()
    torch.manual_seed(0)
    weights = tmp_path / "base.pt"
    torch.save(create_clip("macco-micro").state_dict(), weights)
    cfg = _cfg(world, world_tables, tmp_path / "r", mode="negclip", neg_images=True, max_steps=2,
               pretrained=str(weights))
    check_tables(cfg)  # no image_neighbours needed
    s = train(cfg)
    kept = read_table(TABLES["image_neighbours"], tmp_path / "r" / "image_neighbours").to_pylist()
    caps = read_table(TABLES["captions"], world_tables["captions"]).to_pylist()
    clip = create_clip("macco-micro", str(weights))
    assert kept == image_neighbours(NeighboursConfig(arch="macco-micro", split="train"), caps, world, model=clip)
    assert s["samples"]["neighbour_images"]["without_neighbour"] == 0
    stamp = (tmp_path / "r" / "image_neighbours" / "manifest.json").stat().st_mtime_ns
    from model.data import build_samples

    samples = build_samples({k: v for k, v in world_tables.items() if k != "root"}, "train")[0]
    again, _ = load_candidates(cfg, samples)  # read back, not recomputed
    assert (tmp_path / "r" / "image_neighbours" / "manifest.json").stat().st_mtime_ns == stamp
    assert again == load_candidates(_cfg(world, world_tables, tmp_path / "r", mode="negclip", neg_images=True,
                                         tables={**neighbour_tables, "image_neighbours": str(tmp_path / "r" /
                                                                                            "image_neighbours")}),
                                    samples)[0]


def test_bad_neighbour_configs_are_one_line():
    with pytest.raises(ConfigError, match="neg_images: NegCLIP's neighbour images are for modes negclip"):
        load_config(None, ["mode=clip-ft", "neg_images=true"])
    with pytest.raises(ConfigError, match="even batch_size") as e:
        load_config(None, ["mode=negclip", "neg_images=true", "batch_size=7"])
    assert "\n" not in str(e.value)
