"""The GPU run's pipeline sections: grounding throughput (``ground``) and a whole flow on the synthetic world
(``e2e``, its world and tables prepared by ``prepare_world``). The shared helpers are in ``common``."""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from common import Emit, _free, _sync


def build_hf_swint(root: Path) -> Path:
    """transformers' GroundingDINO at full size with random weights: the default config's Swin-T backbone and a
    bert-base-sized text tower over the tests' small vocabulary (bert-base-uncased's vocabulary cannot be
    fetched), with the default 800/1333 processor, saved as a model directory for the hf backend."""
    import torch
    from transformers import (BertConfig, BertTokenizer, GroundingDinoConfig, GroundingDinoForObjectDetection,
                              GroundingDinoImageProcessor, GroundingDinoProcessor)

    from tests_support import write_tiny_bert

    torch.manual_seed(0)
    bert = write_tiny_bert(root / "bert", with_model=False)
    tok = BertTokenizer(str(bert / "vocab.txt"), do_lower_case=True)
    model = GroundingDinoForObjectDetection(GroundingDinoConfig(text_config=BertConfig(vocab_size=len(tok)))).eval()
    proc = GroundingDinoProcessor(image_processor=GroundingDinoImageProcessor(), tokenizer=tok)
    out = root / "hf"
    model.save_pretrained(out)
    proc.save_pretrained(out)
    return out


def _ground_rate(grounder, items: list, single: int, device: str) -> dict:
    sync = _sync(device)
    grounder.ground(items[:2])  # warm-up
    sync()
    t0 = time.perf_counter()
    grounder.ground(items)
    sync()
    batched = len(items) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for it in items[:single]:
        grounder.ground([it])
    sync()
    per_image = single / (time.perf_counter() - t0)
    return {"batched": batched, "per_image": per_image, "ratio": batched / per_image}


def ground(emit: Emit, size: dict, device: str) -> None:
    """Batched vs per-image grounding: the hf backend (transformers' GroundingDINO), then groundingdino-py."""
    import importlib.util

    from PIL import Image

    from pipeline.grounding import make_grounder
    from pipeline.grounding.base import GroundingConfig, GroundItem

    w, h = size["ground_wh"]
    imgs = [Image.effect_noise((w, h), 40 + i).convert("RGB") for i in range(size["ground_images"])]
    items = [GroundItem(i, w, h, ["a small red circle", "a blue square", "grass"], im) for i, im in enumerate(imgs)]
    import transformers

    tv = transformers.__version__
    if not hasattr(transformers, "GroundingDinoForObjectDetection"):
        emit.skip("hf", f"transformers {tv} has no GroundingDinoForObjectDetection")
    else:
        from tests_support import build_tiny_hf_groundingdino

        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            build = build_hf_swint if size["ground_model"] == "swint" else build_tiny_hf_groundingdino
            model_dir = build(Path(d))
            build_s = time.perf_counter() - t0
            g = make_grounder(GroundingConfig(backend="hf", model_dir=str(model_dir), device=device,
                                              batch_size=size["ground_batch"]))
            params = sum(p.numel() for p in g.model.parameters()) / 1e6
            r = _ground_rate(g, items, size["ground_single"], device)
            emit.row(backend="hf", model=size["ground_model"], params_m=params, transformers=tv, image=f"{w}x{h}",
                     batch=size["ground_batch"], images=len(items), half=device.startswith("cuda"),
                     build_s=build_s, **r)
            del g
            _free(device)
    if size["ground_model"] == "tiny":
        emit.skip("groundingdino", "not part of the tiny dry run (bench/ground.py measures groundingdino-py on the "
                                   "CPU; the lent machine lacks it)")
    elif importlib.util.find_spec("groundingdino") is None:
        emit.skip("groundingdino", "groundingdino-py is not installed (it builds its model only under "
                                   f"transformers 4.x; this machine has {tv}, so it is not carried)")
    elif int(tv.split(".")[0]) >= 5:
        emit.skip("groundingdino", f"groundingdino-py builds its model only under transformers 4.x (here {tv})")
    else:
        import ground as gbench

        with tempfile.TemporaryDirectory() as d:
            files = gbench.build("tiny" if size["ground_model"] == "tiny" else "full", Path(d))
            g = make_grounder(GroundingConfig(backend="groundingdino", device=device, batch_size=size["ground_batch"],
                                              extra={"image_size": min(w, h)}, **files))
            r = _ground_rate(g, items, size["ground_single"], device)
            emit.row(backend="groundingdino", model=size["ground_model"], transformers=tv, image=f"{w}x{h}",
                     batch=size["ground_batch"], images=len(items), half=device.startswith("cuda"), **r)


# ---- evaluation ---------------------------------------------------------------------------------------------


WORLD_TABLES = ("captions", "token_masks", "scene_graphs", "regions")


def world_tables(world: Path) -> dict[str, Path]:
    t = world / "tables"
    return {"captions": t / "captions", "token_masks": t / "token_masks", "scene_graphs": t / "scene_graphs",
            "regions": t / "ground" / "regions"}


def prepare_world(world: Path, images: int, size: int, seed: int = 0) -> dict[str, Path]:
    """A synthetic world under ``world/images`` and its training tables under ``world/tables``: captions ->
    parse (spaCy) -> ground (the world's annotations), as the tests' ``world_tables`` fixture builds them."""
    from pipeline.world import WorldConfig, generate_world
    from tests_support import build_world_tables

    root = world / "images"
    generate_world(root, WorldConfig(seed=seed, images=images, size=size, benchmarks=False))
    build_world_tables(root, world / "tables")
    return world_tables(world)


def e2e(emit: Emit, size: dict, device: str, world: str | None = None) -> None:
    """``macco train`` (``model.train.main``) for a few steps on the world, then its export loaded back."""
    import importlib.util

    import open_clip
    import torch
    import yaml

    from model.train import main as train_main

    world_dir = Path(world) if world else None
    tmp = tempfile.TemporaryDirectory()
    if world_dir is None or not all(p.exists() for p in world_tables(world_dir).values()):
        if importlib.util.find_spec("spacy") is None:
            emit.skip("e2e", f"no prepared world at {world_dir} (make gpu-wheels writes it; carry bench/gpu/.carry) "
                             "and spaCy, which the parse stage needs, is not installed here")
            return
        world_dir = Path(tmp.name) / "world"
        t0 = time.perf_counter()
        prepare_world(world_dir, size["world_images"], size["world_size"])
        emit("note", world="built here", seconds=time.perf_counter() - t0)
    tables = world_tables(world_dir)
    out_dir = Path(tmp.name) / "run"
    cfg = {"arch": size["e2e_arch"], "mode": "macco", "batch_size": size["e2e_batch"],
           "max_steps": size["e2e_steps"], "workers": size["e2e_workers"], "warmup": 2,
           "log_every": max(1, size["e2e_steps"] // 4), "progress": False, "device": device,
           "out_dir": str(out_dir), "image_root": str(world_dir / "images"),
           "tables": {k: str(v) for k, v in tables.items()}}
    cfg_file = Path(tmp.name) / "train.yaml"
    cfg_file.write_text(yaml.safe_dump({"train": cfg}))
    t0 = time.perf_counter()
    summary = train_main(["--config", str(cfg_file)])  # what `macco train --config FILE` runs
    wall = time.perf_counter() - t0
    hist = summary["history"]
    first, last = hist[0], hist[-1]
    steady = ((last["step"] - first["step"]) * size["e2e_batch"] / (last["elapsed_s"] - first["elapsed_s"])
              if len(hist) > 1 and last["elapsed_s"] > first["elapsed_s"] else None)
    precision = json.loads((out_dir / "config.json").read_text())["precision"]
    if precision == "auto":  # as model.train.setup resolves it
        precision = "auto: " + ("fp16 + GradScaler" if device.startswith("cuda") else "fp32")
    emit.row(arch=size["e2e_arch"], batch=size["e2e_batch"], steps=summary["steps"], workers=size["e2e_workers"],
             wall_s=wall, train_s=last["elapsed_s"],
             samples_per_s=summary["steps"] * size["e2e_batch"] / max(last["elapsed_s"], 1e-9),
             steady_samples_per_s=steady, steady_steps=f"{first['step']}-{last['step']}",
             pairs_per_epoch=summary["samples"]["pairs_per_epoch"],
             losses={k: v for k, v in last.items() if k.endswith("_loss")},
             first_losses={k: v for k, v in first.items() if k.endswith("_loss")}, precision=precision)
    # the export: local-dir and .pt loads agree with each other and with the final checkpoint's CLIP
    exp = summary["export"]
    local = open_clip.create_model(f"local-dir:{exp['dir']}")
    arch = json.loads((Path(exp["dir"]) / "open_clip_config.json").read_text())["macco"]["arch"]
    from model.factory import register_model_configs

    register_model_configs()
    pt = open_clip.create_model(arch, pretrained=exp["pt"])
    ck = torch.load(summary["checkpoint"], map_location="cpu", weights_only=True)["task"]
    clip_sd = {k[len("clip."):]: v for k, v in ck.items() if k.startswith("clip.")}
    sd = local.state_dict()
    same_keys = set(sd) == set(clip_sd) == set(pt.state_dict())
    same_weights = same_keys and all(torch.equal(sd[k], clip_sd[k].to(sd[k].dtype)) for k in sd)
    res = local.visual.image_size
    res = res[0] if isinstance(res, (tuple, list)) else res
    x = torch.randn(2, 3, res, res)
    local, pt = local.to(device).eval(), pt.to(device).eval()
    with torch.no_grad():
        a, b = local.encode_image(x.to(device)), pt.encode_image(x.to(device))
    emit("export", keys=exp["keys"], same_keys=same_keys, same_weights=same_weights,
         local_vs_pt_max_abs=float((a - b).abs().max()), device=str(device))
    tmp.cleanup()
