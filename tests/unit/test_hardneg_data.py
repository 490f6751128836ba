"""model/hardneg_data.py and the dataset's hard-negative slots: the negatives of a run made from its scene_graphs
table, the same for the same seed, a caption without a negative carried as an invalid slot (never as one)."""
from pathlib import Path

import open_clip
import torch

from data_schemas.geometry import Geometry
from model.data import DataConfig, MaccoDataset, build_samples
from model.factory import register_model_configs
from model.hardneg_data import PLACEHOLDER, build_hard_negatives, summary_note


def _samples(world_tables):
    tables = {k: Path(v) for k, v in world_tables.items() if k != "root"}
    return tables, build_samples(tables, "train")[0]


def test_negatives_are_made_per_run_from_the_scene_graphs_seeded(world_tables):
    tables, samples = _samples(world_tables)
    a = build_hard_negatives(tables, samples, "ce-clip", seed=0)
    assert a.texts == build_hard_negatives(tables, samples, "ce-clip", seed=0).texts
    assert a.texts != build_hard_negatives(tables, samples, "ce-clip", seed=1).texts  # the replacements are drawn
    assert len(a.texts) == len(samples) and all(len(t) == len(a.kinds) == 4 for t in a.texts)
    for texts, valid in zip(a.texts, a.valid):
        assert all((t == PLACEHOLDER) != ok for t, ok in zip(texts, valid))
    s = a.summary
    assert s["with_negatives"] == sum(any(v) for v in a.valid) and s["captions"] == len(samples)
    assert s["made"] == {k: sum(v[i] for v in a.valid) for i, k in enumerate(a.kinds)}
    assert f"{s['with_negatives']} of {len(samples)} captions" in summary_note("ce-clip", s)


def test_the_dataset_gives_valid_slots_only_where_a_negative_exists(world, world_tables):
    register_model_configs()
    tables, samples = _samples(world_tables)
    neg = build_hard_negatives(tables, samples, "negclip", seed=0)
    neg.valid[0] = [False] * len(neg.kinds)  # a caption with no negative
    neg.texts[0] = [PLACEHOLDER] * len(neg.kinds)
    tok = open_clip.get_tokenizer("macco-micro")
    ds = MaccoDataset(samples, DataConfig(image_root=str(world)), Geometry(32, 8), tokenizer=tok, hard=neg)
    item = ds[(0, 0)]
    assert item["hard_texts"].shape == (1, tok.context_length) and not item["hard_valid"].any()
    with_neg = next(i for i, v in enumerate(neg.valid) if sum(v) > 1)
    drawn = {tuple(ds[(e, with_neg)]["hard_texts"][0].tolist()) for e in range(12)}  # one per (epoch, index)
    valid_tokens = {tuple(tok([t])[0].tolist()) for t, ok in zip(neg.texts[with_neg], neg.valid[with_neg]) if ok}
    assert drawn <= valid_tokens and len(drawn) > 1
    assert all(ds[(e, with_neg)]["hard_valid"].all() for e in range(3))
    assert torch.equal(ds[(5, with_neg)]["hard_texts"], ds[(5, with_neg)]["hard_texts"])  # keyed on (epoch, index)


def test_a_files_negatives_are_slots_as_given_blank_and_missing_ones_counted(tmp_path):
    from data_schemas import TABLES, write_table
    from model.data import Sample
    from model.hardneg_data import given_negatives

    spec = TABLES["negative_captions"]
    write_table(spec, tmp_path / "n", spec.from_rows([{"caption_id": 1, "negatives": ["a cat on a dog", " ", "b"]},
                                                      {"caption_id": 2, "negatives": []}]))
    samples = [Sample(c, f"{c}.png", [], [], []) for c in (1, 2, 3)]
    neg = given_negatives(tmp_path / "n", samples, "negclip")
    assert neg.kinds == ("given_0", "given_1")  # as many slots as the longest list of real negatives
    assert neg.texts == [["a cat on a dog", "b"], [PLACEHOLDER] * 2, [PLACEHOLDER] * 2]
    assert neg.valid == [[True, True], [False, False], [False, False]]
    s = neg.summary
    assert (s["with_negatives"], s["without_negatives"], s["blank_dropped"]) == (1, 2, 1)
    assert s["without_negatives_by_reason"] == {"not_in_file": 1, "empty_list": 1}
    assert "1 of 3 captions have a hard negative" in summary_note("negclip", s)
