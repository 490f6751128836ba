import json
import math
import subprocess
import sys

import open_clip
import pytest
import torch
import torch.multiprocessing as mp

import ddp_support as ds
from model.factory import register_model_configs
from model.optim import param_groups, warmup_cosine
from model.train import load_config, train
from model.train_step import NonFiniteLoss
from tests_support import micro_train_config as _cfg


def cfg_for(world, tables, out, **kw):
    base = dict(arch="macco-micro", batch_size=8, max_steps=6, workers=0, lr_clip=1e-3, lr_predictor=1e-3,
                warmup=2, log_every=1, progress=False, out_dir=str(out), image_root=str(world),
                tables={k: str(v) for k, v in tables.items() if k != "root"})
    base.update(kw)
    return load_config(None, [], **base)


def test_config_overrides_and_errors():
    cfg = load_config(None, ["lr_clip=1e-4", "mode=clip-ft", "betas=[0.9, 0.98]", "max_steps=3"])
    assert cfg.lr_clip == 1e-4 and cfg.mode == "clip-ft" and cfg.betas == (0.9, 0.98) and cfg.max_steps == 3
    with pytest.raises(ValueError, match=r"train config: unknown key\(s\) \[.lr.\]"):
        load_config(None, ["lr=1"])
    with pytest.raises(ValueError, match="max_steps"):
        load_config(None, ["max_steps=abc"])


def test_cpu_training_keeps_freed_memory_instead_of_faulting_it_back_in():
    """A 160 MB buffer freed and allocated again: glibc's default returns it to the OS and every new one
    page-faults in again; after keep_freed_cpu_memory() the freed memory is reused (run in a fresh process)."""
    import platform
    import textwrap
    from pathlib import Path

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    code = textwrap.dedent("""
        import resource, torch
        from model.runtime import keep_freed_cpu_memory
        def faults():
            r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            for _ in range(3):
                torch.ones(40_000_000)
            return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0
        before = faults()
        applied = keep_freed_cpu_memory()
        faults()  # the first allocation under the new thresholds grows the heap once
        # the best of three rounds: one round inside a full clean-clone suite once saw one buffer's worth of
        # faults (39,063 = one 160 MB buffer; not reproduced in 6 standalone runs, cause not found)
        print(before, applied, min(faults() for _ in range(3)))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(Path(__file__).resolve().parents[2])).stdout.split()
    before, applied, after = int(out[0]), out[1] == "True", int(out[2])
    assert applied and before > 3 * 30_000 and after < 1_000


def test_enum_like_options_are_checked_and_yaml_booleans_read_as_on_off():
    assert load_config(None, ["fused_adamw=on"]).fused_adamw == "on"  # YAML reads `on` as True
    assert load_config(None, ["fused_adamw=off"]).fused_adamw == "off"
    with pytest.raises(ValueError, match=r"precision: 'bf-16' is not one of \['auto', 'fp32', 'bf16', 'fp16'\]"):
        load_config(None, ["precision=bf-16"])
    with pytest.raises(ValueError, match=r"mode: 'maco' is not one of"):
        load_config(None, ["mode=maco"])
    with pytest.raises(ValueError, match="YAML read True as a boolean; quote the value"):
        load_config(None, ["device=yes"])


def test_schedule_is_the_reference_cosine():
    f = warmup_cosine(50, 1000)
    assert f(0) == pytest.approx(1 / 50) and f(49) == pytest.approx(1.0)
    assert f(50) == pytest.approx(1.0) and f(525) == pytest.approx(0.5) and f(1000) == pytest.approx(0.0, abs=1e-12)


def test_param_groups_follow_the_reference(world):
    from model.train import TrainConfig, build_task

    task = build_task(TrainConfig(arch="macco-micro"))
    groups = {g["name"]: g for g in param_groups(task, TrainConfig())}
    names = {id(p): n for n, p in task.named_parameters()}
    g2 = {names[id(p)] for p in groups["predictor"]["params"]}
    assert "clip.logit_scale" in g2 and "text_mask_token" in g2 and "img_mask_token" in g2
    assert any(n.startswith("text_predictor.") and n.endswith("bias") for n in g2)  # decayed, as the reference
    g0 = {names[id(p)] for p in groups["clip_no_decay"]["params"]}
    g1 = {names[id(p)] for p in groups["clip_decay"]["params"]}
    assert "clip.visual.class_embedding" in g0 and "clip.positional_embedding" in g1
    assert "clip.token_embedding.weight" in g1 and not any("ln_" in n or n.endswith("bias") for n in g1)
    assert groups["predictor"]["weight_decay"] == 0.01 and groups["clip_decay"]["weight_decay"] == 0.2
    assert len(g0) + len(g1) + len(g2) == len(list(task.parameters()))
    moved = {names[id(p)] for p in param_groups(task, TrainConfig(logit_scale_group="clip"))[0]["params"]}
    assert "clip.logit_scale" in moved


def test_training_reduces_every_loss_and_export_loads_in_open_clip(world, world_tables, tmp_path):
    cfg = cfg_for(world, world_tables, tmp_path / "run", max_steps=40, batch_size=16, lr_clip=3e-3,
                  lr_predictor=3e-3, warmup=3, log_every=1)
    s = train(cfg)
    hist = s["history"]
    for term in ("contrast_loss", "intra_modal_contrast_loss", "text_reconstruction_loss",
                 "image_reconstruction_loss"):
        first = sum(h[term] for h in hist[:5]) / 5
        last = sum(h[term] for h in hist[-5:]) / 5
        assert last < first, (term, first, last)
    exp = s["export"]
    register_model_configs()
    model, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{exp['dir']}")
    ck = torch.load(s["checkpoint"], weights_only=True)
    keys = set(model.state_dict())
    assert not any("predictor" in k or "mask_token" in k for k in keys)
    from model.train import build_task
    task = build_task(cfg)
    task.load_state_dict(ck["task"])
    tok = open_clip.get_tokenizer("ViT-B-32")
    t = tok(["a red circle above a blue square"])
    x = torch.randn(1, 3, 32, 32)
    model.eval(), task.eval()
    with torch.no_grad():
        assert torch.allclose(model.encode_text(t), task.clip.encode_text(t), atol=1e-6)
        assert torch.allclose(model.encode_image(x), task.clip.encode_image(x), atol=1e-6)
    m2, _, _ = open_clip.create_model_and_transforms("macco-micro", pretrained=exp["pt"])
    with torch.no_grad():
        assert torch.allclose(m2.encode_text(t), model.encode_text(t), atol=1e-6)
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("step,lr_clip,lr_predictor,contrast_loss") and len(rows) == 41
    assert list((tmp_path / "run" / "logs").glob("events.out.tfevents.*"))


def test_progress_rows_every_log_every_steps(world, world_tables, tmp_path):
    from model.train import format_log_row

    rows = []
    train(cfg_for(world, world_tables, tmp_path / "p", max_steps=5, log_every=2), on_log=rows.append)
    assert [r["step"] for r in rows] == [2, 4, 5] and {r["total_steps"] for r in rows} == {5}
    assert rows[-1]["eta_s"] == 0 and all(r["samples_per_s"] > 0 and r["eta_s"] >= 0 for r in rows)
    line = format_log_row("macco-s0", rows[0])
    assert line.startswith("train macco-s0: step 2/5 (40 %) | ") and "samples/s | ETA 0m" in line
    assert f"contrast {rows[0]['contrast_loss']:.4f}" in line and f"total {rows[0]['total_loss']:.4f}" in line
    assert f"text_reconstruction {rows[0]['text_reconstruction_loss']:.4f}" in line  # every *_loss term shows


def test_resume_continues_the_same_schedule(world, world_tables, tmp_path):
    full = train(cfg_for(world, world_tables, tmp_path / "a", max_steps=6))
    train(cfg_for(world, world_tables, tmp_path / "b", max_steps=6, save_every=3))
    # b ran through; now pretend it was killed after its step-3 checkpoint
    ck = sorted((tmp_path / "b" / "checkpoints").glob("step-*.pt"))
    assert [p.name for p in ck] == ["step-0000003.pt", "step-0000006.pt"]
    ck[-1].unlink()
    resumed = train(cfg_for(world, world_tables, tmp_path / "b", max_steps=6, resume="auto"))
    assert resumed["start_step"] == 3
    a = {h["step"]: h for h in full["history"]}
    for h in resumed["history"]:
        for k in ("total_loss", "contrast_loss", "text_reconstruction_loss", "image_reconstruction_loss", "lr_clip"):
            assert h[k] == pytest.approx(a[h["step"]][k], rel=1e-4, abs=1e-6), (h["step"], k)
    wa = torch.load(full["checkpoint"], weights_only=True)["task"]
    wb = torch.load(resumed["checkpoint"], weights_only=True)["task"]
    for k in wa:
        assert torch.allclose(wa[k].float(), wb[k].float(), atol=1e-5), k


def test_one_caption_per_image_per_epoch():
    """captions_per_image 1: each epoch passes over every image once with one of its captions, drawn afresh
    each epoch and seeded; ranks split it; a resumed sampler yields the same batches."""
    from model.data import EpochBatchSampler, Sample, image_groups

    samples = [Sample(i, f"img{i // 5 if i < 40 else 8 + (i - 40) // 3}.jpg", [], [], []) for i in range(46)]
    groups = image_groups(samples)  # 8 images with 5 captions, 2 with 3
    assert len(groups) == 10 and groups[0] == [0, 1, 2, 3, 4] and groups[-1] == [43, 44, 45]
    s = EpochBatchSampler(len(samples), 5, seed=3, start_step=0, total_steps=6, groups=groups)
    assert s.steps_per_epoch == 2
    batches = list(s)
    image = {i: samples[i].file_name for i in range(46)}
    for e in range(3):
        epoch = [i for b in batches[2 * e:2 * e + 2] for (ep, i) in b]
        assert {ep for b in batches[2 * e:2 * e + 2] for (ep, _) in b} == {e}
        assert sorted(image[i] for i in epoch) == sorted({s.file_name for s in samples})  # each image once
    draws = [sorted(i for b in batches[2 * e:2 * e + 2] for _, i in b) for e in range(3)]
    assert draws[0] != draws[1] or draws[1] != draws[2]  # other captions in other epochs
    assert list(EpochBatchSampler(46, 5, 3, 3, 6, groups=groups)) == batches[3:]  # resume
    assert batches == list(EpochBatchSampler(46, 5, 3, 0, 6, groups=groups))  # seeded
    ranks = [list(EpochBatchSampler(46, 5, 3, 0, 1, r, 2, groups)) for r in (0, 1)]
    assert sorted(i for r in ranks for _, i in r[0]) == sorted(i for _, i in batches[0] + batches[1])
    with pytest.raises(ValueError, match="10 images are fewer than one batch of 8 x 2"):
        EpochBatchSampler(46, 8, 3, 0, 1, 0, 2, groups)


def test_captions_per_image_in_training(world, world_tables, tmp_path):
    one = train(cfg_for(world, world_tables, tmp_path / "one", max_steps=None, epochs=1, captions_per_image=1))
    every = train(cfg_for(world, world_tables, tmp_path / "all", max_steps=None, epochs=1))
    coco = json.loads((world / "annotations" / "captions_train2014.json").read_text())
    images = {a["image_id"] for a in coco["annotations"]}
    assert one["samples"]["pairs_per_epoch"] == len(images) < every["samples"]["pairs_per_epoch"] == len(coco["annotations"])
    assert one["steps"] == len(images) // 8 and every["steps"] == len(coco["annotations"]) // 8
    with pytest.raises(ValueError, match="captions_per_image: '2' is not one of"):
        cfg_for(world, world_tables, tmp_path / "x", captions_per_image=2)


def test_fp16_grad_scaler_trains_and_resumes(world, world_tables, tmp_path):
    """precision fp16: autocast + GradScaler (the reference's, and the CUDA default); the scaler's state is in
    the checkpoint and a resumed run continues with it."""
    kw = dict(max_steps=4, precision="fp16", device="cpu")
    full = train(cfg_for(world, world_tables, tmp_path / "a", **kw))
    train(cfg_for(world, world_tables, tmp_path / "b", save_every=2, **kw))
    ck = torch.load(tmp_path / "b" / "checkpoints" / "step-0000002.pt", weights_only=True)
    # enabled: it starts at 2^16 and halves on each step whose fp16 gradients overflowed (skipping the step)
    assert ck["scaler"]["scale"] in {2.0 ** k for k in range(10, 17)}
    (tmp_path / "b" / "checkpoints" / "step-0000004.pt").unlink()
    resumed = train(cfg_for(world, world_tables, tmp_path / "b", resume="auto", **kw))
    assert resumed["start_step"] == 2
    a = {h["step"]: h for h in full["history"]}
    for h in resumed["history"]:
        assert h["total_loss"] == pytest.approx(a[h["step"]]["total_loss"], rel=1e-4), h["step"]
    end = torch.load(resumed["checkpoint"], weights_only=True)["scaler"]
    assert end == torch.load(full["checkpoint"], weights_only=True)["scaler"]


@pytest.mark.parametrize("mode,hardneg", [("clip-ft", False), ("text-only", False), ("image-only", False),
                                          ("macco", True), ("clip-ft", True)])
def test_every_mode_trains(world, world_tables, tmp_path, mode, hardneg):
    s = train(cfg_for(world, world_tables, tmp_path / "m", max_steps=2, mode=mode, hardneg=hardneg))
    assert s["steps"] == 2 and math.isfinite(s["history"][-1]["total_loss"])


def test_non_finite_loss_stops_with_step_and_terms(world, world_tables, tmp_path):
    with pytest.raises(NonFiniteLoss, match=r"non-finite loss at step \d+: .*contrast_loss"):
        train(cfg_for(world, world_tables, tmp_path / "nan", max_steps=4, lr_clip=1e30, lr_predictor=1e30,
                      warmup=1))


def test_corrupt_images_are_skipped_and_counted(world, world_tables, tmp_path):
    import shutil

    root = tmp_path / "imgs"
    shutil.copytree(world, root)
    for p in list((root / "train2014").glob("*.jpg"))[:3]:
        p.write_bytes(b"broken")
    s = train(cfg_for(root, world_tables, tmp_path / "c", max_steps=6, image_root=str(root),
                      max_skipped_fraction=0.9))
    assert s["skipped_images"] > 0 and s["history"][-1]["skipped_images"] == s["skipped_images"]
    assert s["skipped_examples"] and all(e["path"].endswith(".jpg") for e in s["skipped_examples"])


def test_cli_train(world, world_tables, tmp_path, capsys):
    import yaml

    from macco.cli import main

    cfg = {k: v for k, v in vars(cfg_for(world, world_tables, tmp_path / "cli", max_steps=2)).items()}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"train": cfg}))
    assert main(["train", "--config", str(tmp_path / "t.yaml"), "mode=clip-ft", "max_steps=2"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 2


def test_ddp_two_processes_gloo(world, world_tables, tmp_path):
    """torchrun --nproc-per-node 2 on CPU (gloo): features gathered across ranks, one export."""
    import yaml

    cfg = {k: v for k, v in vars(cfg_for(world, world_tables, tmp_path / "ddp", max_steps=3, batch_size=4)).items()}
    (tmp_path / "d.yaml").write_text(yaml.safe_dump({"train": cfg}))
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                        "29533", "-m", "model.train", "--config", str(tmp_path / "d.yaml"), "device=cpu"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "train macco: step 3/3 (100 %)" in r.stderr  # one progress line per logged step, from rank 0 only
    assert r.stderr.count("step 2/3") == 1
    summary = json.loads((tmp_path / "ddp" / "summary.json").read_text())
    assert summary["steps"] == 3 and (tmp_path / "ddp" / "export" / "open_clip_model.safetensors").exists()


def test_scene_targets_and_crops(world):
    from model.scene import SceneVocab, crop_targets, scene_targets

    targets, vocab = scene_targets(world / "scenes_train.json")
    scenes = json.loads((world / "scenes_train.json").read_text())
    assert len(targets) == len(scenes) and vocab == SceneVocab.from_world(world / "world.json")
    sc = scenes[0]
    t = targets[sc["file_name"]]
    assert t[:, 0].sum() == len({s["colour"] for s in sc["shapes"]})
    s = sc["shapes"][0]
    c = vocab.colours.index(s["colour"])
    if [x["colour"] for x in sc["shapes"]].count(s["colour"]) == 1:
        x1, y1, x2, y2 = s["box"]
        assert t[c, 2].item() == pytest.approx((x1 + x2) / 128) and t[c, 4].item() == vocab.kinds.index(s["kind"])
    one = torch.tensor([[1.0, 1, 0.5, 0.25, 2, 1]])
    cropped = crop_targets(one, (16, 0, 32, 32), 64, 64)  # top 16, left 0, 32 x 32
    assert cropped[0, 2].item() == 1.0 and cropped[0, 3].item() == 0.0 and cropped[0, 1] == 1
    assert crop_targets(one, (32, 0, 32, 32), 64, 64)[0, 1] == 0  # the centre left the crop: not supervised
    bad = world.parent / "bad-scenes"
    bad.mkdir(exist_ok=True)
    (bad / "world.json").write_text((world / "world.json").read_text())
    (bad / "scenes_train.json").write_text(json.dumps([{**sc, "shapes": [{**s, "colour": "teal"}]}]))
    with pytest.raises(ValueError, match="scenes_train.json: image .*colour 'teal' not in the vocabulary"):
        scene_targets(bad / "scenes_train.json")


def test_base_chain_scene_then_locked_image_text_tower(world, world_tables, tmp_path):
    """mode scene trains the image tower only (text tower exactly as it came); then clip-ft with lock_image
    trains the text tower only (image tower exactly the scene stage's): the demo's base recipe."""
    seed = train(cfg_for(world, world_tables, tmp_path / "seed", max_steps=2, mode="clip-ft"))
    scene = train(cfg_for(world, world_tables, tmp_path / "scene", max_steps=24, batch_size=16, mode="scene",
                          lr_clip=3e-3, lr_predictor=3e-3, pretrained=seed["export"]["pt"]))
    hist = scene["history"]
    assert {"presence_loss", "position_loss", "kind_loss", "size_loss"} <= set(hist[-1])
    assert sum(h["total_loss"] for h in hist[-4:]) < sum(h["total_loss"] for h in hist[:4])
    lit = train(cfg_for(world, world_tables, tmp_path / "lit", max_steps=3, mode="clip-ft", lock_image=True,
                        pretrained=scene["export"]["pt"]))
    sd = {k: torch.load(r["export"]["pt"], weights_only=True)["state_dict"] for k, r in
          (("seed", seed), ("scene", scene), ("lit", lit))}
    vis = [k for k in sd["seed"] if k.startswith("visual.")]
    txt = [k for k in sd["seed"] if k.startswith(("transformer.", "token_embedding", "ln_final", "text_projection"))]
    assert vis and txt
    assert all(torch.equal(sd["seed"][k], sd["scene"][k]) for k in txt)
    assert not all(torch.equal(sd["seed"][k], sd["scene"][k]) for k in vis)
    assert all(torch.equal(sd["scene"][k], sd["lit"][k]) for k in vis)
    assert not all(torch.equal(sd["scene"][k], sd["lit"][k]) for k in txt)
    with pytest.raises(ValueError, match="mode 'scene' trains the image tower"):
        train(cfg_for(world, world_tables, tmp_path / "bad", max_steps=1, mode="scene", lock_image=True))


def test_probe_runs_on_a_trained_macco_run_with_its_text_predictor(world, world_tables, tmp_path):
    from model.probes import ProbeConfig, probe

    s = train(cfg_for(world, world_tables, tmp_path / "m", max_steps=2, mode="macco"))
    tables = {k: world_tables[k] for k in ("captions", "token_masks", "scene_graphs", "regions")}
    res = probe("macco-micro", s["export"]["pt"], ProbeConfig(world=str(world), text_pairs=200),
                s["checkpoint"], tables)
    g = res["gradient_norms"]
    assert set(g) == {"contrast_loss", "intra_modal_contrast_loss", "text_reconstruction_loss",
                      "image_reconstruction_loss", "batch"}
    text, image = g["text_reconstruction_loss"], g["image_reconstruction_loss"]
    assert text["text"] > 0 and text["image"] == 0  # the image is detached there
    assert image["image"] == 0 and image["text"] > 0  # masked-image query detached
    rec = res["reconstruction"]
    assert rec["relation_n"] > 0 and rec["attribute_n"] > 0 and 0 <= rec["relation_acc"] <= 1
    assert 0 <= res["retrieval"]["i2t_r1"] <= 1 and 0 <= res["zeroshot_top1"] <= 1
    assert res["text"]["swap_n"] > 0 and -1 <= res["text"]["relation_swap_cosine"] <= 1
    ft = train(cfg_for(world, world_tables, tmp_path / "ft", max_steps=1, mode="clip-ft"))
    res = probe("macco-micro", ft["export"]["pt"], ProbeConfig(world=str(world)), ft["checkpoint"], tables)
    assert "reconstruction" not in res and set(res["gradient_norms"]) == {"contrast_loss", "batch"}


# ---- gradient accumulation (open_clip's accum_freq) and clipping: model.train_step.train_step, the step train() runs
ACCUM_CASES = {
    "macco": {"mode": "macco"},
    "clip-ft": {"mode": "clip-ft"},
    "text-only": {"mode": "text-only"},
    "image-only": {"mode": "image-only"},
    "no-mca": {"mode": "macco", "mca": False},
    "no-mir": {"mode": "macco", "mir": False},
    "hardneg": {"mode": "macco", "hardneg": True},
    "clip-ft-hardneg": {"mode": "clip-ft", "hardneg": True},
    "self-attention": {"mode": "macco", "text_self_layers": 1, "image_self_layers": 1},
}


def assert_same_step(got: tuple[dict, dict], want: tuple[dict, dict]) -> None:
    """Two ``ds.accumulated_grads`` results: the same logged terms and every gradient to float tolerance (1e-5 of
    the tensor's largest entry)."""
    (got_terms, got_grads), (want_terms, want_grads) = got, want
    assert set(got_terms) == set(want_terms)
    for k, v in want_terms.items():
        assert got_terms[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
    assert set(got_grads) == set(want_grads) and "clip.logit_scale" in want_grads
    for k, g in want_grads.items():
        torch.testing.assert_close(got_grads[k], g, rtol=1e-4, atol=1e-5 * (g.abs().max().item() + 1e-12), msg=k)


@pytest.mark.parametrize("name", list(ACCUM_CASES))
def test_accumulated_step_equals_the_full_batch_step(name):
    """accum_steps k: the contrastive terms still contrast the whole batch (MCA's masked columns, MIR, the hard
    negatives), the per-sample reconstruction means divide by the whole batch's masked samples (micro-batches with
    different numbers of them: ds.make_batch's masks are uneven), and the logit scale takes its gradient once, so
    the step's terms and gradients are the unaccumulated step's. (3, 9) runs an 8-row batch (an image skipped) as
    micro-batches of 2, 3 and 3 rows."""
    batch = ds.make_batch()
    task = ds.make_task(ACCUM_CASES[name])
    full = ds.accumulated_grads(ds.accum_state(task, task, 1, 8, 1), batch)
    for accum, batch_size in ((2, 8), (3, 9), (8, 8)):
        task = ds.make_task(ACCUM_CASES[name])
        assert_same_step(ds.accumulated_grads(ds.accum_state(task, task, accum, batch_size, 1), batch), full)


def test_accumulated_step_on_siglip_towers_equals_the_full_batch_step():
    """The sigmoid form: its logit bias, like the scale, takes its gradient once per step."""
    from model.factory import register_model_configs
    from model.task import MaccoConfig, MaccoTask

    register_model_configs()
    g = torch.Generator().manual_seed(5)
    batch = {"image": torch.randn(6, 3, 32, 32, generator=g), "text": torch.randint(3, 1000, (6, 16), generator=g),
             "text_mask": torch.rand(6, 16, generator=g) < 0.2, "image_mask": torch.rand(6, 16, generator=g) < 0.3,
             "hard_text": torch.randint(3, 1000, (6, 16), generator=g)}
    steps = []
    for accum in (1, 3):
        torch.manual_seed(0)
        task = MaccoTask(open_clip.create_model("macco-siglip-tiny"), MaccoConfig(hardneg=True))
        steps.append(ds.accumulated_grads(ds.accum_state(task, task, accum, 6, 1), batch))
    assert task.sigmoid and "clip.logit_bias" in steps[0][1]
    assert_same_step(steps[1], steps[0])


def test_accumulation_through_the_training_loop_equals_the_full_batch(world, world_tables, tmp_path):
    """A batch of the real loader (masks drawn per sample by the dataset): train_step with accum_steps 2 gives the
    gradients of the task's forward on the whole batch."""
    from model.train import setup
    from model.train_step import train_step

    state = setup(cfg_for(world, world_tables, tmp_path / "a", mode="macco", hardneg=True, accum_steps=2,
                          max_steps=1))
    batch = next(iter(state.loader))
    batch.pop("skipped")
    params = [p for p in state.task.parameters() if p.requires_grad]
    out = state.task(batch, stats=False, sizes=state.task.sizes_for(batch))
    want = torch.autograd.grad(out["total_loss"], params, allow_unused=True)
    seen = {}
    real_step = state.scaler.step
    state.scaler.step = lambda opt: (seen.update(grads=[p.grad.clone() if p.grad is not None else None
                                                        for p in params]), real_step(opt))
    terms, _ = train_step(state, batch, 0, stats=False)
    assert {k: pytest.approx(float(v), rel=1e-5, abs=1e-6) for k, v in terms.items()} == \
        {k: float(v) for k, v in out.items()}
    for w, got in zip(want, seen["grads"]):
        if w is None:
            assert got is None or not got.any()
        else:
            torch.testing.assert_close(got, w, rtol=1e-4, atol=1e-5 * (w.abs().max().item() + 1e-12))


def test_accumulation_replays_the_forward_random_draws(monkeypatch):
    """Random draws inside the forward (here patch dropout) are the same in a micro-batch's gradient pass as in
    its caching pass: the live rows spliced in are the cached ones."""
    from open_clip.transformer import PatchDropout

    from model.train_state import MicroBatch

    task = ds.make_task({"mode": "clip-ft"})
    task.clip.visual.patch_dropout = PatchDropout(0.5)
    batch = ds.make_batch()
    part = {k: v[:4] for k, v in batch.items()}
    a, b = task.batch_rows(part), task.batch_rows(part)
    assert not torch.allclose(a["i_glob"], b["i_glob"])  # the dropout draws change the features
    pairs = []
    real = MicroBatch.splice
    monkeypatch.setattr(MicroBatch, "splice", lambda self, live: pairs.append((live, self.rows[self.index])) or
                        real(self, live))
    ds.accumulated_grads(ds.accum_state(task, task, 2, 8, 1), batch)
    assert len(pairs) == 2
    for live, cached in pairs:
        assert set(live) == set(cached)
        for k in live:
            torch.testing.assert_close(live[k].detach(), cached[k], rtol=1e-6, atol=1e-7, msg=k)


@pytest.mark.parametrize("mode", ["lm", "scene"])
def test_accumulation_is_refused_by_a_task_that_cannot_split_its_terms(world, world_tables, tmp_path, mode):
    from data_schemas.config import ConfigError
    from model.train import setup

    with pytest.raises(ConfigError, match=rf"train {mode}: accum_steps 2 is not supported: .* cannot split its "
                                          "batch-level terms"):
        setup(cfg_for(world, world_tables, tmp_path / mode, mode=mode, accum_steps=2, max_steps=1))


def test_grad_clip_norm_clips_every_gradient_as_torch_does():
    """grad_clip_norm: the total norm over every parameter's gradient is clipped to it, the gradients equal
    torch's clip_grad_norm_ of the unclipped ones; with fp16's GradScaler on (2^16) they are clipped after the
    unscale, and through an accumulated step the same."""
    batch = ds.make_batch()
    task = ds.make_task({"mode": "macco"})
    _, grads = ds.accumulated_grads(ds.accum_state(task, task, 1, 8, 1), batch)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads.values()]))
    limit = float(norm) / 4
    held = {k: torch.nn.Parameter(torch.zeros_like(g)) for k, g in grads.items()}  # torch clips the .grad of these
    for k, g in grads.items():
        held[k].grad = g.clone()
    torch.nn.utils.clip_grad_norm_(list(held.values()), limit)
    want = {k: h.grad for k, h in held.items()}
    assert not torch.equal(want["text_mask_token"], grads["text_mask_token"])  # clipped
    for accum, scaled in ((1, False), (1, True), (2, True)):
        task = ds.make_task({"mode": "macco"})
        state = ds.accum_state(task, task, accum, 8, 1)
        state.cfg.grad_clip_norm = limit
        if scaled:
            state.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
        _, got = ds.accumulated_grads(state, batch)
        got_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in got.values()]))
        assert float(got_norm) == pytest.approx(limit, rel=1e-5), (accum, scaled)
        assert set(got) == set(want)
        for k, g in want.items():
            torch.testing.assert_close(got[k], g, rtol=1e-4, atol=1e-5 * (g.abs().max().item() + 1e-12), msg=k)
    task = ds.make_task({"mode": "macco"})
    state = ds.accum_state(task, task, 1, 8, 1)
    state.cfg.grad_clip_norm = float(norm) * 2  # above the norm: nothing changes
    _, loose = ds.accumulated_grads(state, batch)
    assert all(torch.equal(loose[k], g) for k, g in grads.items())


def test_predictors_only_on_frozen_towers_then_a_joint_run_from_that_checkpoint(world, world_tables, tmp_path):
    """The gated experiment's two phases: predictors trained on frozen towers at a constant lr, then a joint run
    whose task (towers, predictors, mask tokens) starts from that checkpoint."""
    from model.optim import schedule

    frozen = train(cfg_for(world, world_tables, tmp_path / "p", max_steps=3, freeze_towers=True, schedule="constant",
                           warmup=1, save_every=1))
    first = torch.load(tmp_path / "p" / "checkpoints" / "step-0000001.pt", weights_only=True)["task"]
    start = torch.load(tmp_path / "p" / "checkpoints" / "step-0000003.pt", weights_only=True)["task"]
    clip_keys = [k for k in start if k.startswith("clip.")]
    assert clip_keys and all(torch.equal(start[k], first[k]) for k in clip_keys)  # towers (and logit scale) frozen
    assert not all(torch.equal(start[k], first[k]) for k in start if "predictor" in k)  # the predictors learn
    assert frozen["history"][-1]["lr_predictor"] == pytest.approx(1e-3)  # constant, no cosine tail
    assert [schedule(load_config(None, ["schedule=constant", "warmup=2"]), 10)(s) for s in (0, 1, 5, 9)] == \
        [0.5, 1.0, 1.0, 1.0]
    joint = cfg_for(world, world_tables, tmp_path / "j", max_steps=1, init_task=str(tmp_path / "p" / "checkpoints" /
                                                                                   "step-0000003.pt"))
    from model.train import build_task

    task = build_task(joint)
    loaded = task.state_dict()
    assert all(torch.equal(loaded[k], start[k]) for k in start if "predictor" in k or "mask_token" in k)


def test_a_withheld_image_leaves_the_text_term_blind_to_the_image():
    """The image-free control: the text predictor reads zeros where the image's features were."""
    import ddp_support as ds

    torch.manual_seed(0)
    task = ds.make_task({"mode": "text-only", "withhold_image": True}).eval()
    batch = ds.make_batch()
    other = {**batch, "image": torch.randn_like(batch["image"])}
    a, b = task(batch, stats=False), task(other, stats=False)
    assert a["text_reconstruction_loss"].item() == pytest.approx(b["text_reconstruction_loss"].item(), abs=1e-6)
    sighted = ds.make_task({"mode": "text-only"}).eval()
    assert sighted(batch, stats=False)["text_reconstruction_loss"].item() != pytest.approx(
        sighted(other, stats=False)["text_reconstruction_loss"].item(), abs=1e-6)


def test_tf32_is_set_for_a_run_and_restored_after_it(world, world_tables, tmp_path, monkeypatch):
    """#32: TF32 is a knob of the run (train.tf32), set while it trains and restored after it, so a flow's later
    tasks in the same worker (fp32 evaluation) do not inherit it."""
    import torch

    from model import train as train_module
    from model.runtime import tf32

    seen = []
    monkeypatch.setattr(train_module.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(train_module, "_train", lambda *a: seen.append(torch.backends.cuda.matmul.allow_tf32) or {})
    torch.backends.cuda.matmul.allow_tf32 = False
    for knob in (True, False):
        train_module.train(_cfg(world, world_tables, tmp_path / "r", tf32=knob, device="cpu"))
        train_module.train(_cfg(world, world_tables, tmp_path / "r", tf32=knob, device="auto"))
    assert seen == [False, True, False, False] and torch.backends.cuda.matmul.allow_tf32 is False
    before = torch.backends.cudnn.allow_tf32
    with tf32(not before):
        assert torch.backends.cudnn.allow_tf32 is (not before)
    assert torch.backends.cudnn.allow_tf32 is before


# ---- DDP semantics (tests/ddp_support.py): a step over a global batch split across 2 gloo processes equals one
# process's step on the whole batch — every loss term (averaged over ranks) and every gradient after DDP's all-reduce
CASES = {
    "macco": {"mode": "macco"},
    "macco-self-attention": {"mode": "macco", "text_self_layers": 1, "image_self_layers": 1},
    "macco-hardneg-no-mca": {"mode": "macco", "hardneg": True, "mca": False},
    "clip-ft": {"mode": "clip-ft"},
}


@pytest.fixture(scope="module")
def two_process_steps(tmp_path_factory):
    return ds.two_process_steps(tmp_path_factory.mktemp("ddp"), CASES)


@pytest.mark.parametrize("name", list(CASES))
def test_two_process_step_equals_one_process_step(name, two_process_steps):
    task = ds.make_task(CASES[name])
    ref_terms = ds.step(task, task, ds.make_batch(), slice(None))
    ref_grads = ds.grads(task)
    got = two_process_steps[name]
    assert set(got["terms"]) == set(ref_terms)
    for k, v in ref_terms.items():
        assert got["terms"][k] == pytest.approx(float(v), rel=1e-5, abs=1e-6), k
    assert set(got["grads"]) == set(ref_grads) and ref_grads
    for k, g in ref_grads.items():
        scale = g.abs().max().item() + 1e-12
        assert torch.allclose(got["grads"][k], g, rtol=1e-4, atol=1e-5 * scale), (k, (got["grads"][k] - g).abs().max())


def test_accumulated_micro_batches_all_reduce_once_and_equal_one_process(tmp_path):
    """Gradient accumulation under DDP all-reduced every micro-batch's gradients: with no_sync the reduction runs
    once per step (measured with a comm hook: as many all-reduce calls as one micro-batch's), and the gradients
    equal one process's accumulated step over the same global micro-batches, and its unaccumulated step."""
    mp.start_processes(ds.accum_worker, args=(2, str(tmp_path / "init"), str(tmp_path / "rank0.pt")), nprocs=2,
                       join=True, start_method="spawn")
    got = torch.load(tmp_path / "rank0.pt", weights_only=True)
    assert got[1]["allreduces"] > 0 and got[2]["allreduces"] == got[1]["allreduces"]
    # one process: micro-batch m holds every rank's m-th micro-batch (rank r's rows r*4 .. r*4+3, 2 per micro)
    order = [0, 1, 4, 5, 2, 3, 6, 7]
    batch = {k: v[order] for k, v in ds.make_batch().items()}
    task = ds.make_task({"mode": "macco"})
    _, ref = ds.accumulated_grads(ds.accum_state(task, task, 2, 8, 1), batch)
    assert set(got[2]["grads"]) == set(ref) and ref
    for k, g in ref.items():
        scale = g.abs().max().item() + 1e-12
        assert torch.allclose(got[2]["grads"][k], g, rtol=1e-4, atol=1e-5 * scale), k
    # and the unaccumulated step on the whole global batch: the contrastive batch is every rank's every micro-batch
    task = ds.make_task({"mode": "macco"})
    ds.step(task, task, ds.make_batch(), slice(None))
    for k, g in ds.grads(task).items():
        scale = g.abs().max().item() + 1e-12
        assert torch.allclose(got[2]["grads"][k], g, rtol=1e-4, atol=1e-5 * scale), k


def test_the_ddp_entry_and_macco_train_refuse_each_other_on_one_out_dir(tmp_path, monkeypatch, capsys):
    """``torchrun -m model.train`` (``main``): rank 0 holds the runner's lock on ``out_dir`` for the whole run, so a
    ``macco train`` into that folder meanwhile is refused in one line, as a second ``macco train`` is."""
    import model.train as mt
    from macco.cli import main as cli
    from tests_support import one_line_error

    out, seen = tmp_path / "run", {}

    def meanwhile(cfg, *args):
        seen["code"] = cli(["train", "arch=macco-micro", f"out_dir={out}"])
        seen["err"] = one_line_error(capsys, "train")
        return {}

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(mt, "train", meanwhile)
    assert mt.main(["arch=macco-micro", f"out_dir={out}"]) == {}
    assert seen["code"] == 2 and f"{out}: another macco process is writing it (pid " in seen["err"]


def test_the_ddp_entry_under_a_held_lock_refuses_on_rank_0_only(tmp_path, monkeypatch):
    """A second ``torchrun -m model.train`` into a folder being written: its rank 0 fails at once (exit 2, one line,
    before any model or process group); a rank other than 0 takes no lock (rank 0 holds its run's)."""
    import model.train as mt
    from data_schemas import lock_file
    from data_schemas.locks import StageLocked, output_lock

    out, calls = tmp_path / "run", []
    monkeypatch.setattr(mt, "train", lambda cfg, *a: calls.append(cfg.out_dir) or {})
    with output_lock(lock_file(out, "output"), out):
        monkeypatch.setenv("RANK", "0")
        with pytest.raises(StageLocked, match="another macco process is writing it"):
            mt.main(["arch=macco-micro", f"out_dir={out}"])
        assert calls == []
        monkeypatch.setenv("RANK", "1")
        assert mt.main(["arch=macco-micro", f"out_dir={out}"]) == {} and calls == [str(out)]
        monkeypatch.setenv("RANK", "0")
        proc = subprocess.run([sys.executable, "-m", "model.train", "arch=macco-micro", f"out_dir={out}"],
                              capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("model.train: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "another macco process is writing it" in proc.stderr and not out.exists()
