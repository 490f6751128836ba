"""ViT-B/16 and ViT-L/14 (random weights) through MACCO training on CPU: a couple of steps at batch 2, the
predictor depths and patch grids of the larger backbones, and an export that loads in plain open_clip."""
import json

import open_clip
import pytest
import torch

from model.train import load_config, train


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
