"""data_schemas/checks.py: every DuckDB check; a clean fixture passes, one violating fixture per check fails."""
import json

import pyarrow as pa
import pytest

from data_schemas import TABLES
from data_schemas.checks import run_checks
from tests_support import clean_rows, write_all


VIOLATIONS = {
    "captions.key_unique": lambda d: d["captions"].append(dict(d["captions"][0])),
    "captions.image_size_positive": lambda d: d["captions"][1].update(width=0),
    "captions.caption_not_empty": lambda d: d["captions"][1].update(caption="  "),
    "scene_graphs.key_unique": lambda d: d["scene_graphs"].append(dict(d["scene_graphs"][0])),
    "scene_graphs.kind_valid": lambda d: d["scene_graphs"][0].update(kind="thing"),
    "scene_graphs.caption_exists": lambda d: d["scene_graphs"].append(dict(d["scene_graphs"][0], caption_id=5)),
    "scene_graphs.span_matches_text": lambda d: d["scene_graphs"][0].update(char_start=7),
    "scene_graphs.heads_exist": lambda d: d["scene_graphs"][3].update(subject_id=9),
    "token_masks.key_unique": lambda d: d["token_masks"].append(dict(d["token_masks"][0])),
    "token_masks.caption_exists": lambda d: d["token_masks"][1].update(caption_id=3),
    "token_masks.eot_consistent": lambda d: d["token_masks"][0].update(eot_idx=8),
    "token_masks.positions_in_caption": lambda d: d["token_masks"][0].update(relation_idx=[4, 9]),
    "token_masks.coverage": lambda d: [t.update(relation_idx=[], attribute_idx=[]) for t in d["token_masks"]],
    "regions.key_unique": lambda d: d["regions"].append(dict(d["regions"][0])),
    "regions.concept_exists": lambda d: d["regions"][0].update(concept_id=7),
    "regions.box_inside_image": lambda d: d["regions"][2].update(box_xyxy=[30.0, 2.0, 65.0, 48.0]),
    "regions.box_finite": lambda d: d["regions"][2].update(box_xyxy=[float("nan"), 2.0, 20.0, 48.0]),
    "regions.score_in_unit_interval": lambda d: d["regions"][1].update(score=1.5),
    "regions.coverage": lambda d: d["regions"].__setitem__(slice(None), d["regions"][:1]) or
    d["patch_masks"].__setitem__(slice(None), d["patch_masks"][:1]),
    "patch_masks.key_unique": lambda d: d["patch_masks"].append(dict(d["patch_masks"][0])),
    "patch_masks.grid_consistent": lambda d: d["patch_masks"][0].update(grid=7),
    "patch_masks.patch_in_grid": lambda d: d["patch_masks"][1].update(patch_idx=[0, 64]),
    "patch_masks.region_exists": lambda d: d["patch_masks"][1].update(concept_id=1),
    "errors.key_unique": lambda d: d["errors"].append(dict(d["errors"][0])),
    "eval_results.key_unique": lambda d: d["eval_results"].append(dict(d["eval_results"][0])),
    "official.key_unique": lambda d: d["official"].append(dict(d["official"][0])),
    "official.caption_exists": lambda d: d["official"][0].update(caption_id=99),
    "image_neighbours.key_unique": lambda d: d["image_neighbours"].append(dict(d["image_neighbours"][0])),
    "image_neighbours.not_itself": lambda d: d["image_neighbours"][0].update(neighbour_image_id=10),
    "image_neighbours.image_exists": lambda d: d["image_neighbours"][0].update(image_id=12),
    "image_neighbours.neighbour_exists": lambda d: d["image_neighbours"][1].update(neighbour_image_id=13),
    "negative_captions.key_unique": lambda d: d["negative_captions"].append(dict(d["negative_captions"][0])),
    "negative_captions.caption_exists": lambda d: d["negative_captions"][0].update(caption_id=99),
    "eval_results.accuracy_in_unit_interval": lambda d: d["eval_results"][0].update(accuracy=1.2),
    "eval_results.counts_consistent": lambda d: d["eval_results"][0].update(correct=11),
    "eval_results.level_valid": lambda d: d["eval_results"][0].update(level="average"),
    "eval_results.metric_valid": lambda d: d["eval_results"][0].update(metric="score"),
    "eval_results.one_number_column": lambda d: d["eval_results"][0].update(value=5.0),
    "eval_results.value_in_range": lambda d: d["eval_results"][0].update(metric="correlation", accuracy=None,
                                                                         value=1.5),
    "eval_results.partial_names_missing": lambda d: d["eval_results"][0].update(partial=True, missing=[]),
    "eval_results.cases_match_counts": lambda d: d["eval_results"][0].update(level="group", cases="1101x"),  # n 10
}


NOT_NULL_CHECKS = {c.name for s in TABLES.values() for c in s.checks if c.name.endswith("key_not_null")}


def test_clean_fixture_passes_every_check(tmp_path):
    results = run_checks(write_all(tmp_path, clean_rows()))
    assert results and all(r.status == "pass" for r in results), [r for r in results if r.status != "pass"]
    every = {c.name for s in TABLES.values() for c in s.checks} | {f"{n}.not_empty" for n in TABLES if n != "errors"}
    assert {r.check for r in results} == every


def test_hf_tokenizer_rows_start_at_zero_and_end_with_their_own_token(tmp_path):
    """A SentencePiece row (tokenizer hf:..., no start token, </s> = 1 at eot_idx): position 0 is a caption
    word; the CLIP EOT id is not asked of it. Position -1 or one at/after eot_idx still fails."""
    rows = clean_rows()
    hf = dict(caption_id=2, tokenizer="hf:siglip", token_ids=[9, 14, 22, 1] + [0] * 12, eot_idx=3,
              relation_idx=[], attribute_idx=[0], object_idx=[1, 2], unmatched=[], truncated=False)
    rows["token_masks"].append(hf)
    assert all(r.status == "pass" for r in run_checks(write_all(tmp_path / "ok", rows)))
    hf.update(object_idx=[1, 3])
    failed = {r.check for r in run_checks(write_all(tmp_path / "bad", rows)) if r.status == "fail"}
    assert failed == {"token_masks.positions_in_caption"}


def test_every_check_has_a_violating_fixture():
    every = {c.name for s in TABLES.values() for c in s.checks}
    assert every - NOT_NULL_CHECKS == set(VIOLATIONS)


@pytest.mark.parametrize("check", sorted(VIOLATIONS))
def test_violation_fails_exactly_its_check(tmp_path, check):
    rows = clean_rows()
    VIOLATIONS[check](rows)
    results = run_checks(write_all(tmp_path, rows), params={"min_text_mask_coverage": 0.5,
                                                            "min_grounded_coverage": 0.75})
    failed = {r.check for r in results if r.status == "fail"}
    assert check in failed
    res = next(r for r in results if r.check == check)
    assert res.bad_rows >= 1 and 1 <= len(res.examples) <= 5


def test_key_not_null_checks_catch_foreign_writers(tmp_path):
    """A table written by another tool (nullable columns) with null keys fails the not-null checks."""
    import pyarrow.parquet as pq

    d = tmp_path / "captions"
    d.mkdir()
    t = pa.table({"caption_id": pa.array([None, 2], pa.int64()), "image_id": pa.array([1, 1], pa.int64()),
                  "file_name": ["a", "b"], "width": pa.array([1, 1], pa.int32()),
                  "height": pa.array([1, 1], pa.int32()), "caption": ["x", "y"], "split": ["t", "t"]})
    pq.write_table(t, d / "part-00000.parquet")
    (d / "manifest.json").write_text(json.dumps({"table": "captions", "schema_version": 1,
                                                 "parts": ["part-00000.parquet"]}))
    res = {r.check: r for r in run_checks({"captions": d})}
    assert res["captions.key_not_null"].status == "fail"
