"""SigLIP end to end on the world (#18): a SigLIP-shaped local-dir folder (macco-siglip-tiny's architecture and a
SentencePiece-style tokenizer the test trains on the world's captions), tables tokenized with it, training in
every mode with the sigmoid objective, resume, and an export that loads in plain open_clip with its tokenizer."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def siglip_dir(world, tmp_path_factory):
    from model.factory import CONFIG_DIR
    from pipeline.siglip_folder import build_siglip_folder

    coco = json.loads((world / "annotations" / "captions_train2014.json").read_text())
    corpus = [a["caption"] for a in coco["annotations"]]
    cfg = json.loads((CONFIG_DIR / "macco-siglip-tiny.json").read_text())
    return build_siglip_folder(corpus, tmp_path_factory.mktemp("siglip") / "macco-siglip", cfg, context_length=32,
                               vocab_size=400)


@pytest.fixture(scope="module")
def siglip_tables(world, siglip_dir, tmp_path_factory):
    from tests_support import build_world_tables

    out = tmp_path_factory.mktemp("siglip-tables")
    build_world_tables(world, out, clip_model=siglip_dir)
    return {"captions": out / "captions", "token_masks": out / "token_masks", "scene_graphs": out / "scene_graphs",
            "regions": out / "ground" / "regions"}


def _cfg(world, tables, siglip_dir, out, **kw):
    from model.train import load_config

    base = dict(arch=siglip_dir, batch_size=8, max_steps=4, workers=0, lr_clip=1e-3, lr_predictor=1e-3, warmup=1,
                log_every=1, progress=False, out_dir=str(out), image_root=str(world),
                tables={k: str(v) for k, v in tables.items()})
    return load_config(None, [], **{**base, **kw})


def test_token_masks_are_in_the_siglip_tokenizer(siglip_tables, siglip_dir):
    from data_schemas import TABLES, read_table

    rows = read_table(TABLES["token_masks"], siglip_tables["token_masks"]).to_pylist()
    assert rows and len({r["tokenizer"] for r in rows}) == 1 and rows[0]["tokenizer"].startswith("hf:macco-siglip-")
    assert all(len(r["token_ids"]) == 32 and r["token_ids"][r["eot_idx"]] == 1 for r in rows)
    share = sum(bool(r["relation_idx"] or r["attribute_idx"]) for r in rows) / len(rows)
    assert share > 0.9 and not any(r["truncated"] for r in rows)


@pytest.mark.parametrize("mode,extra", [("macco", {}), ("clip-ft", {}), ("text-only", {}), ("image-only", {}),
                                        ("macco", {"mca": False}), ("macco", {"mir": False}),
                                        ("macco", {"hardneg": True})])
def test_every_mode_trains_on_siglip_and_exports_a_plain_model(world, siglip_tables, siglip_dir, tmp_path, mode,
                                                               extra):
    import open_clip

    from model.train import train

    s = train(_cfg(world, siglip_tables, siglip_dir, tmp_path / "run", mode=mode, **extra))
    losses = [r["total_loss"] for r in s["history"]]
    assert s["steps"] == 4 and all(torch.isfinite(torch.tensor(losses)))
    export = tmp_path / "run" / "export"
    model = open_clip.create_model(f"local-dir:{export}").eval()  # plain open_clip, no macco code
    tok = open_clip.get_tokenizer(f"local-dir:{export}")
    with torch.no_grad():
        t = model.encode_text(tok(["a red circle left of a blue square"]))
    assert t.shape == (1, 64) and type(model).__name__ == "CustomTextCLIP"
    assert not any("predictor" in k or "mask_token" in k for k in model.state_dict())
    state = torch.load(s["export"]["pt"], weights_only=True)["state_dict"]
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())  # the trained weights


def test_siglip_run_resumes_to_the_uninterrupted_result(world, siglip_tables, siglip_dir, tmp_path):
    from model.train import train

    full = train(_cfg(world, siglip_tables, siglip_dir, tmp_path / "full", save_every=2))
    ck = sorted((tmp_path / "full" / "checkpoints").glob("step-*.pt"))[0]
    assert ck.name == "step-0000002.pt"
    resumed = train(_cfg(world, siglip_tables, siglip_dir, tmp_path / "res", save_every=2, resume=str(ck)))
    assert [r["total_loss"] for r in resumed["history"]][-1] == pytest.approx(
        [r["total_loss"] for r in full["history"]][-1], rel=1e-5)
    assert resumed["export"]["sha256"] == full["export"]["sha256"]


def test_a_fine_tune_of_a_local_dir_starts_from_its_base_export(world, siglip_tables, siglip_dir, tmp_path):
    """open_clip's local-dir loader ignores ``pretrained``: the base's weights are loaded after (create_clip)."""
    from model.factory import create_clip
    from model.train import train

    base = train(_cfg(world, siglip_tables, siglip_dir, tmp_path / "base", mode="clip-ft"))
    clip = create_clip(siglip_dir, base["export"]["pt"])
    state = torch.load(base["export"]["pt"], weights_only=True)["state_dict"]
    assert all(torch.equal(v, state[k]) for k, v in clip.state_dict().items())
    plain = create_clip(siglip_dir)
    assert not all(torch.equal(v, state[k]) for k, v in plain.state_dict().items())


def test_every_mode_on_siglip_through_the_flow(harness, tmp_path):
    """The whole flow on a SigLIP-shaped local-dir folder: the tables in its tokenizer and patch grid, every
    training mode with the sigmoid objective, the evaluation and the probes on the world; a changed tokenizer
    file is a new parse (and train) key, never a cache hit."""
    import yaml

    from model.factory import CONFIG_DIR
    from pipeline.world import WorldConfig, generate_world
    from pipeline.siglip_folder import build_siglip_folder
    from tests_support import run_flow_states

    world_cfg = {"seed": 3, "images": 30, "size": 32, "eval_fraction": 0.3}
    generate_world(tmp_path / "w", WorldConfig(**world_cfg))  # the same world the flow makes: its captions
    coco = json.loads((tmp_path / "w" / "annotations" / "captions_train2014.json").read_text())
    folder = build_siglip_folder([a["caption"] for a in coco["annotations"]], tmp_path / "siglip",
                                 json.loads((CONFIG_DIR / "macco-siglip-tiny.json").read_text()), context_length=32,
                                 vocab_size=400)
    modes = {"clip-ft": {"mode": "clip-ft"}, "macco": {"mode": "macco"}, "text-only": {"mode": "text-only"},
             "image-only": {"mode": "image-only"}, "macco-no-mca": {"mode": "macco", "mca": False},
             "macco-no-mir": {"mode": "macco", "mir": False}, "macco-hn": {"mode": "macco", "hardneg": True}}
    cfg = {"name": "siglip", "artifacts": str(tmp_path / "artifacts"), "world": world_cfg,
           "parse": {"clip_model": folder, "shard_size": 50}, "ground": {"backend": "annotations", "shard_size": 8},
           "masks": {"models": [folder]},
           "validate": {"params": {"min_text_mask_coverage": 0.9, "min_grounded_coverage": 0.9}},
           "train": {"arch": folder, "runs": modes,
                     "common": {"max_steps": 2, "batch_size": 16, "workers": 0, "log_every": 1, "lr_clip": 1e-3}},
           "evaluate": {"benchmarks": ["aro-vgr", "sugarcrepe", "whatsup"], "settings": {"vga_min_count": 1}}}
    path = tmp_path / "siglip.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out, states = run_flow_states(path)
    assert set(out["train"]) == set(modes) and all(s == "Completed" for s in states["train"])
    for label, runs in out["evaluate"].items():
        res = json.loads(Path(runs[0]["results"]).read_text())
        assert set(res["benchmarks"]) == {"aro-vgr", "sugarcrepe", "whatsup"}, label
        assert "r2_x" in res["probes"]["image_global"] and res["probes"]["text"]["relation_swap_cosine"] > 0, label
    masks = out["masks"]["outputs"]["patch_masks"]
    from data_schemas import TABLES, read_table

    assert set(read_table(TABLES["patch_masks"], masks["dir"]).column("grid").to_pylist()) == {4}
    report = (tmp_path / "artifacts" / "runs" / "siglip" / "results.md").read_text()
    assert "macco-hn" in report
    # the tokenizer folder is an input: editing a file in it re-parses (and retrains), never a cache hit
    (Path(folder.removeprefix("local-dir:")) / "tokenizer_config.json").write_text(
        (Path(folder.removeprefix("local-dir:")) / "tokenizer_config.json").read_text() + "\n")
    out2, states2 = run_flow_states(path, stages=["world", "captions", "parse"])
    assert states2["parse"] == ["Completed"] and out2["parse"]["key"] != out["parse"]["key"]


def test_the_demo_base_chain_on_siglip(world, siglip_tables, siglip_dir, tmp_path):
    """mode scene on SigLIP towers (heads on the MAP feature) trains the image tower only; then clip-ft with
    lock_image trains the text tower only against it: the demo's base recipe, on SigLIP."""
    from model.train import train

    scene = train(_cfg(world, siglip_tables, siglip_dir, tmp_path / "scene", mode="scene", max_steps=6,
                       scenes=str(world / "scenes_train.json")))
    assert {"presence_loss", "position_loss", "kind_loss", "size_loss"} <= set(scene["history"][-1])
    lit = train(_cfg(world, siglip_tables, siglip_dir, tmp_path / "lit", mode="clip-ft", lock_image=True,
                     pretrained=scene["export"]["pt"]))
    a, b = (torch.load(r["export"]["pt"], weights_only=True)["state_dict"] for r in (scene, lit))
    vis = [k for k in a if k.startswith("visual.")]
    txt = [k for k in a if k.startswith("text.")]
    assert vis and txt and all(torch.equal(a[k], b[k]) for k in vis)
    assert not all(torch.equal(a[k], b[k]) for k in txt)


def test_the_tokenizer_stage_builds_the_siglip_folder_the_demo_uses(harness, tmp_path):
    """configs/demo-siglip.yaml's shape at a few steps: the tokenizer stage trains a tokenizer on the world's
    training captions and writes the model folder; built:tokenizer is that folder for parse, masks and train;
    a rerun is all Cached."""
    import yaml

    from flows.config import load_config
    from tests_support import run_flow_states

    cfg = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / "demo-siglip.yaml").read_text())
    cfg.update(artifacts=str(tmp_path / "artifacts"), world={"seed": 3, "images": 30, "size": 32, "eval_fraction": 0.3},
               tokenizer={"arch": "macco-siglip-tiny", "vocab_size": 400, "context_length": 32})
    cfg["parse"]["shard_size"] = 50
    cfg["ground"]["shard_size"] = 8
    cfg["validate"] = {"params": {"min_text_mask_coverage": 0.9, "min_grounded_coverage": 0.9}}
    for section in (*cfg["train"]["base"], cfg["train"]["common"]):
        section.update(max_steps=2, batch_size=16)
    cfg["train"]["common"].update(workers=0, log_every=1)
    cfg["evaluate"] = {"benchmarks": ["sugarcrepe", "whatsup"], "settings": {"vga_min_count": 1}}
    path = tmp_path / "demo-siglip.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out, states = run_flow_states(path)
    folder = out["tokenizer"]["outputs"]["tokenizer"]["folder"]
    assert folder.startswith("local-dir:") and (Path(folder[len("local-dir:"):]) / "tokenizer.json").is_file()
    train_caps = sum(1 for r in json.loads((Path(out["world"]["dir"]) / "annotations" /
                                            "captions_train2014.json").read_text())["annotations"])
    assert out["tokenizer"]["captions"] == train_caps > 0  # the training split only
    assert all(r["arch"] == folder for runs in out["train"].values() for r in runs)
    _, again = run_flow_states(path)
    assert set(again["tokenizer"]) == {"Cached"} and set(again["train"]) == {"Cached"}
    with pytest.raises(ValueError, match="built:tokenizer.*tokenizer.arch is not set"):
        load_config(path, {"tokenizer": {"arch": None}})
