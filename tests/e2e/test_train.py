"""Training end to end (model/train.py). SigLIP on the world (#18): a SigLIP-shaped local-dir folder
(macco-siglip-tiny's architecture and a SentencePiece-style tokenizer the test trains on the world's captions), tables
tokenized with it, training in every mode with the sigmoid objective, resume, the demo's base chain, and an export that
loads in plain open_clip with its tokenizer. ViT-B/16 and ViT-L/14 (random weights) through MACCO training on CPU: a
couple of steps at batch 2, the predictor depths and patch grids of the larger backbones, and an export that loads in
plain open_clip."""
from __future__ import annotations

import json

import open_clip
import pytest
import torch

from model.train import load_config, train

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


@pytest.mark.e2e
@pytest.mark.parametrize("arch,grid,width", [("ViT-B-16", 14, 512), ("ViT-L-14", 16, 768)])
def test_larger_backbone_trains_and_exports(world, world_tables, tmp_path, arch, grid, width):
    torch.set_num_threads(2)
    tables = {k: str(v) for k, v in world_tables.items() if k != "root"}
    s = train(load_config(None, [], arch=arch, batch_size=2, max_steps=2, lr_clip=1e-5, lr_predictor=1e-3, warmup=1,
                          workers=0, log_every=1, progress=False, out_dir=str(tmp_path / arch), image_root=str(world),
                          tables=tables))
    assert s["steps"] == 2 and all(torch.isfinite(torch.tensor(h["total_loss"])) for h in s["history"])
    task = torch.load(s["checkpoint"], weights_only=True)["task"]
    depth = {p: len({k.split(".")[2] for k in task if k.startswith(f"{p}.cross_blocks.")})
             for p in ("text_predictor", "image_predictor")}
    assert depth == {"text_predictor": 4, "image_predictor": 6}  # the reference's depths for B/16 and L/14
    assert task["clip.visual.positional_embedding"].shape[0] == grid * grid + 1
    assert task["text_mask_token"].shape == (width,)
    export = tmp_path / arch / "export"
    cfg = json.loads((export / "open_clip_config.json").read_text())
    assert cfg["model_cfg"]["vision_cfg"]["patch_size"] * grid == 224
    model = open_clip.create_model(f"local-dir:{export}")
    state = model.state_dict()
    for k, v in task.items():
        if k.startswith("clip."):
            assert torch.equal(state[k[len("clip."):]], v), k
    with torch.no_grad():
        assert model.encode_image(torch.zeros(1, 3, 224, 224)).shape == (1, width)
