"""Faults in the parse stage: its errors never remove another stage's; a killed parse rerun after edited captions
reuses no old shard."""
from __future__ import annotations

from data_schemas import TABLES, read_table
from macco.cli import main


def test_parse_after_captions_in_one_folder_keeps_the_captions_errors(tmp_path, capsys):
    """The README's sequence: `macco captions --out T` then `macco parse T/captions --out T` replaced the
    captions stage's errors table; its missing_image rows were gone."""
    from pipeline.world import WorldConfig, generate_world

    w = tmp_path / "w"
    generate_world(w, WorldConfig(seed=1, images=6, size=32, eval_fraction=0.5, benchmarks=False))
    victim = sorted((w / "train2014").iterdir())[0]
    victim.unlink()
    t = tmp_path / "T"
    assert main(["captions", str(w), "--out", str(t)]) == 0
    missing = {e["item_id"] for e in read_table(TABLES["errors"], t / "errors").to_pylist()}
    assert len(missing) == 5  # the image's five captions
    assert main(["parse", str(t / "captions"), "--out", str(t), "--model", "macco-micro"]) == 0
    errs = read_table(TABLES["errors"], t / "errors").to_pylist()
    assert {e["item_id"] for e in errs if e["reason"] == "missing_image"} == missing
    assert main(["captions", str(w), "--out", str(t)]) == 0  # a rerun replaces its own rows only
    errs = read_table(TABLES["errors"], t / "errors").to_pylist()
    assert sorted(e["item_id"] for e in errs if e["stage"] == "captions") == sorted(missing)
    capsys.readouterr()
    assert main(["validate", str(t)]) == 0


def test_a_killed_parse_rerun_after_edited_captions_does_not_reuse_old_shards(world_tables, tmp_path):
    from pipeline.parse_stage import ParseConfig, parse_stage

    caps = read_table(TABLES["captions"], world_tables["captions"]).to_pylist()[:20]
    cfg = ParseConfig(clip_model="macco-micro", shard_size=10)
    parse_stage(cfg, caps, tmp_path, only=[0], finalize=False)  # killed after its first shard
    edited = [{**c, "caption": "a blue square is left of a green circle."} for c in caps]  # same count
    parse_stage(cfg, edited, tmp_path, reuse=True)
    sg = read_table(TABLES["scene_graphs"], tmp_path / "scene_graphs").to_pylist()
    assert {r["caption_id"] for r in sg} == {c["caption_id"] for c in caps}
    words = {r["text"] for r in sg if r["kind"] == "attribute"}
    assert words == {"blue", "green"}, words  # no row from the old captions' shard
