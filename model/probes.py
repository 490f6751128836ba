"""Diagnostics of a CLIP on the synthetic world: what the image side knows, what the text side uses, what the
text predictor reconstructs, and general ability (retrieval, zero-shot).

All on held-out world images and captions (the val and test splits; never the training split).
- Image side: cross-validated ridge probes from the global image embedding (and from the patch tokens) to the
  centre x and y of each colour's shape (images where that colour occurs once), R^2 on out-of-fold predictions;
  pair direction: for each held-out "a left of b" / "a above b" pair of such shapes, whether the out-of-fold
  position read-outs order them correctly (chance 50 %).
- Text side: swap sensitivity, the mean cosine between "a X rel a Y" and its subject/object swap "a Y rel a X"
  and its attribute swap (colours exchanged; 1.0 = the swap is invisible); relation direction, a
  cross-validated logistic probe from the text embedding to which of two named shapes the caption puts first
  on the axis (a bag-of-words encoder is at 50 %: both orders have the same words and opposite labels).
- Reconstruction (runs with a text predictor): masked-word accuracy of the text predictor on held-out captions
  with every relation and attribute token masked, as in training, split into relation and attribute words.
- General: image->text and text->image recall@1 over the test split (5 captions per image), and zero-shot
  recognition (the top-1 of the "a <colour> <kind>" prompts is an object of the image).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from data_schemas.geometry import preprocessed

from .probes_text import (_np, bigram_shift, bigram_shift_probe, direction_captions,  # noqa: F401 (API)
                          swap_captions, text_direction_probe, token_and_eot_features)

HELD_OUT = ("val", "test")


@dataclass
class ProbeConfig:
    world: str  # the world root (scenes_<split>.json, world.json, <split>2014/)
    splits: tuple[str, ...] = HELD_OUT
    folds: int = 5
    seed: int = 0
    text_pairs: int = 1200  # generated captions for the text direction probe
    batch_size: int = 256
    device: str = "cpu"


# ---- features ---------------------------------------------------------------------------------------------
@torch.no_grad()
def image_features(model, preprocess, paths: list[Path], batch_size: int = 256,
                   device: str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """(global embeddings [N, E], patch tokens flattened [N, P * E]) after the tower's projection."""
    from .masked import encode_image_tokens

    g, p = [], []
    for i in range(0, len(paths), batch_size):
        ims = preprocessed(preprocess, paths[i:i + batch_size])
        glob, tok = encode_image_tokens(model.visual, torch.stack(ims).to(device))
        g.append(glob.float().cpu().numpy())
        p.append(tok.float().flatten(1).cpu().numpy())
    return np.concatenate(g), np.concatenate(p)


@torch.no_grad()
def text_features(model, tokenizer, texts: list[str], batch_size: int = 256, device: str = "cpu") -> np.ndarray:
    out = []
    for i in range(0, len(texts), batch_size):
        f = model.encode_text(tokenizer(texts[i:i + batch_size]).to(device))
        out.append(torch.nn.functional.normalize(f.float(), dim=-1).cpu().numpy())
    return np.concatenate(out)


# ---- the world's held-out scenes ---------------------------------------------------------------------------
def load_world(root: str | Path, splits=HELD_OUT) -> tuple[dict, list[dict]]:
    """(world.json, scenes of ``splits`` with their image paths under ``path``)."""
    root = Path(root)
    meta_path = root / "world.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path}: not a synthetic world root (probes need world.json)")
    meta = json.loads(meta_path.read_text())
    scenes = []
    for split in splits:
        for sc in json.loads((root / f"scenes_{split}.json").read_text()):
            scenes.append({**sc, "split": split, "path": root / f"{split}2014" / sc["file_name"]})
    return meta, scenes


def unique_positions(meta: dict, scenes: list[dict]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{colour: (scene indices where it occurs once, centres [n, 2] in [0, 1])}."""
    size = meta["config"]["size"]
    out: dict[str, tuple[list, list]] = {c: ([], []) for c in meta["colours"]}
    for i, sc in enumerate(scenes):
        cols = [s["colour"] for s in sc["shapes"]]
        for s in sc["shapes"]:
            if cols.count(s["colour"]) == 1:
                x1, y1, x2, y2 = s["box"]
                out[s["colour"]][0].append(i)
                out[s["colour"]][1].append(((x1 + x2) / 2 / size, (y1 + y2) / 2 / size))
    return {c: (np.array(ix, dtype=int), np.array(xy, dtype=float).reshape(-1, 2)) for c, (ix, xy) in out.items()}


# ---- image side ------------------------------------------------------------------------------------------
def _oof_ridge(X: np.ndarray, y: np.ndarray, folds: int, seed: int) -> np.ndarray:
    from sklearn.linear_model import RidgeCV
    from sklearn.model_selection import KFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    est = make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-2, 5, 15)))
    return cross_val_predict(est, X, y, cv=KFold(folds, shuffle=True, random_state=seed))


def position_probe(features: np.ndarray, meta: dict, scenes: list[dict], folds: int = 5, seed: int = 0) -> dict:
    """Per colour, out-of-fold R^2 of x and y; the pair direction accuracy of the out-of-fold read-outs."""
    from sklearn.metrics import r2_score

    pos = unique_positions(meta, scenes)
    pred: dict[tuple[int, str], np.ndarray] = {}
    r2 = {}
    for colour, (ix, xy) in pos.items():
        if len(ix) < 2 * folds:
            continue
        p = _oof_ridge(features[ix], xy, folds, seed)
        r2[colour] = {"x": float(r2_score(xy[:, 0], p[:, 0])), "y": float(r2_score(xy[:, 1], p[:, 1])),
                      "n": int(len(ix))}
        for k, i in enumerate(ix):
            pred[(int(i), colour)] = p[k]
    correct = n = 0
    for i, sc in enumerate(scenes):
        for r in sc["relations"]:
            axis = {"left of": 0, "above": 1}.get(r["relation"])
            a, b = sc["shapes"][r["subject"]]["colour"], sc["shapes"][r["object"]]["colour"]
            if axis is None or (i, a) not in pred or (i, b) not in pred:
                continue
            n += 1
            correct += int(pred[(i, a)][axis] < pred[(i, b)][axis])
    return {"r2_x": float(np.mean([v["x"] for v in r2.values()])) if r2 else None,
            "r2_y": float(np.mean([v["y"] for v in r2.values()])) if r2 else None,
            "direction_acc": correct / n if n else None, "direction_n": n, "per_colour": r2}


# ---- general ability -------------------------------------------------------------------------------------
def retrieval(I: np.ndarray, T: np.ndarray, text_image: np.ndarray) -> dict:
    """Recall@1 both ways; ``text_image`` [n_texts] is each caption's image row in ``I`` (both normalised)."""
    S = I @ T.T
    i2t = float(np.mean([text_image[S[i].argmax()] == i for i in range(len(I))]))
    t2i = float(np.mean(S.argmax(axis=0) == text_image))
    return {"i2t_r1": i2t, "t2i_r1": t2i}


def zero_shot(I: np.ndarray, prompts_T: np.ndarray, types: list[tuple[str, str]], scenes: list[dict]) -> float:
    """Share of images whose top-1 "a <colour> <kind>" prompt names one of their shapes."""
    top = (I @ prompts_T.T).argmax(axis=1)
    return float(np.mean([types[t] in {(s["colour"], s["kind"]) for s in sc["shapes"]} for t, sc in zip(top, scenes)]))


# ---- reconstruction --------------------------------------------------------------------------------------
@torch.no_grad()
def masked_word_accuracy(task, preprocess, rows: list[dict], image_paths: dict[int, Path], batch_size: int = 256,
                         device: str = "cpu", classes: dict[int, str] | None = None,
                         train_rows: list[dict] | None = None) -> dict:
    """The text predictor's accuracy at every masked relation / attribute token of ``rows`` (token-mask rows
    joined with their caption's image id), each caption masked as in training, against its full image; split into
    direction words and filler (``classes``: token id -> direction, ``model.probes_recon``) and, with
    ``train_rows`` (the training captions' token-mask rows), each beside the captions' image-free baseline
    (``image_free``: ``probes_recon.caption_baseline``, a frequency baseline, not a bound)."""
    from .probes_recon import breakdown, caption_baseline

    records: list[tuple[str, int, int]] = []
    for i in range(0, len(rows), batch_size):
        chunk = rows[i:i + batch_size]
        L = len(chunk[0]["token_ids"])
        texts = torch.tensor([r["token_ids"] for r in chunk], device=device)
        mask = torch.zeros(len(chunk), L, dtype=torch.bool, device=device)
        kind = torch.zeros(len(chunk), L, dtype=torch.long, device=device)  # 1 relation, 2 attribute
        for k, r in enumerate(chunk):
            for j in r["attribute_idx"]:
                mask[k, j], kind[k, j] = True, 2
            for j in r["relation_idx"]:
                mask[k, j], kind[k, j] = True, 1
        ims = preprocessed(preprocess, [image_paths[r["image_id"]] for r in chunk])
        pred = task.predicted_words(torch.stack(ims).to(device), texts, mask)
        records += [("relation" if k == 1 else "attribute", int(t), int(p))
                    for k, t, p in zip(kind[mask].tolist(), texts[mask].tolist(), pred.tolist())]
    out = breakdown(records, classes or {})
    if train_rows is not None:
        out["image_free"] = breakdown(caption_baseline(train_rows, rows), classes or {}) | {
            "kind": "caption baseline: the training captions' most frequent word in the mask's context"}
    return out


# ---- all of it -------------------------------------------------------------------------------------------
def run_probes(model, preprocess, tokenizer, cfg: ProbeConfig, task=None, mask_rows: list[dict] | None = None,
               train_rows: list[dict] | None = None) -> dict:
    """Every probe for one CLIP (``task``: its training task, when it has a text predictor, with the held-out
    token-mask rows ``mask_rows`` for the reconstruction probe and the training ones ``train_rows`` for its
    captions' image-free baseline)."""
    model = model.eval()
    meta, scenes = load_world(cfg.world, cfg.splits)
    G, P = image_features(model, preprocess, [sc["path"] for sc in scenes], cfg.batch_size, cfg.device)
    out: dict = {"images": len(scenes), "splits": list(cfg.splits),
                 "image_global": position_probe(G, meta, scenes, cfg.folds, cfg.seed),
                 "image_patches": position_probe(P, meta, scenes, cfg.folds, cfg.seed)}
    swaps = swap_captions(meta, scenes)
    caps = [s[0] for s in swaps]
    T0 = text_features(model, tokenizer, caps, cfg.batch_size, cfg.device)
    T_rel = text_features(model, tokenizer, [s[1] for s in swaps], cfg.batch_size, cfg.device)
    att = [(k, s[2]) for k, s in enumerate(swaps) if s[2] is not None]
    T_att = text_features(model, tokenizer, [a for _, a in att], cfg.batch_size, cfg.device)
    texts, labels = direction_captions(meta, cfg.text_pairs, cfg.seed)
    out["text"] = {"relation_swap_cosine": float(np.mean(np.sum(T0 * T_rel, axis=1))),
                   "attribute_swap_cosine": float(np.mean(np.sum(T0[[k for k, _ in att]] * T_att, axis=1))),
                   "swap_n": len(swaps),
                   "direction_acc": text_direction_probe(text_features(model, tokenizer, texts, cfg.batch_size,
                                                                      cfg.device), labels, cfg.folds, cfg.seed),
                   "direction_n": len(texts)}
    held_out_captions = [a["caption"] for split in cfg.splits for a in json.loads(
        (Path(cfg.world) / "annotations" / f"captions_{split}2014.json").read_text())["annotations"]]
    out["text"] |= bigram_shift_probe(model, tokenizer, held_out_captions, cfg)
    # general ability on the test split
    test = [k for k, sc in enumerate(scenes) if sc["split"] == "test"]
    Gn = G[test] / np.linalg.norm(G[test], axis=1, keepdims=True)
    root = Path(cfg.world)
    ann = json.loads((root / "annotations" / "captions_test2014.json").read_text())["annotations"]
    row = {scenes[k]["image_id"]: j for j, k in enumerate(test)}
    ann = [a for a in ann if a["image_id"] in row]
    Tt = text_features(model, tokenizer, [a["caption"] for a in ann], cfg.batch_size, cfg.device)
    out["retrieval"] = retrieval(Gn, Tt, np.array([row[a["image_id"]] for a in ann])) | {"captions": len(ann)}
    types = [(c, k) for c in meta["colours"] for k in meta["kinds"]]
    Tp = text_features(model, tokenizer, [_np(c, k) for c, k in types], cfg.batch_size, cfg.device)
    out["zeroshot_top1"] = zero_shot(Gn, Tp, types, [scenes[k] for k in test])
    if task is not None and mask_rows:
        paths = {sc["image_id"]: sc["path"] for sc in scenes}
        rows = [r for r in mask_rows if r["image_id"] in paths]
        from .probes_recon import direction_classes

        out["reconstruction"] = masked_word_accuracy(task.eval(), preprocess, rows, paths, cfg.batch_size,
                                                     cfg.device, direction_classes(tokenizer_encode(tokenizer)),
                                                     train_rows)
    return out


def tokenizer_encode(tokenizer):
    """``encode`` (word -> ids, no start/end token) of an open_clip tokenizer: the CLIP BPE's own, a Hugging Face
    tokenizer's without special tokens."""
    if hasattr(tokenizer, "encode") and hasattr(tokenizer, "bpe"):
        return tokenizer.encode
    return lambda word: tokenizer.tokenizer.encode(word, add_special_tokens=False)


def held_out_mask_rows(tables: dict[str, str | Path], splits=HELD_OUT) -> list[dict]:
    """Token-mask rows of the held-out captions with at least one relation or attribute token, with image_id."""
    from data_schemas import TABLES, read_table

    caps = {r["caption_id"]: r for r in read_table(TABLES["captions"], tables["captions"],
                                                    ["caption_id", "image_id", "split"]).to_pylist()
            if r["split"] in splits}
    rows = []
    for r in read_table(TABLES["token_masks"], tables["token_masks"]).to_pylist():
        if r["caption_id"] in caps and (r["relation_idx"] or r["attribute_idx"]):
            rows.append({**r, "image_id": caps[r["caption_id"]]["image_id"]})
    return rows


def load_training_task(train_checkpoint: str | Path, device: str = "cpu"):
    """(training task of a run's checkpoint: CLIP + predictors + mask tokens, its TrainConfig), or (None, cfg)
    for a run that is not a MaccoTask (mode scene or lm)."""
    from .factory import resolve_arch
    from .train import build_task, load_config

    from .factory import weights_file

    with weights_file(train_checkpoint):
        ck = torch.load(train_checkpoint, map_location="cpu", weights_only=True)
    cfg = load_config(None, [], **ck["config"])
    from .task import MODES

    if cfg.mode not in MODES:  # a base stage's task (scene, lm) has no predictors to probe
        return None, cfg
    # the architecture the run built (its weights file decided it, e.g. QuickGELU for OpenAI weights), without
    # loading that file: the checkpoint holds every weight
    task = build_task(load_config(None, [], **{**ck["config"], "pretrained": None,
                                               "arch": resolve_arch(cfg.arch, cfg.pretrained)}), weights_later=True)
    task.load_state_dict(ck["task"])
    return task.to(device).eval(), cfg


def term_gradient_norms(task, batch: dict) -> dict[str, dict[str, float]]:
    """For one batch: the L2 norm of each *weighted* loss term's gradient over the text tower's and over the
    image tower's parameters (which term drives each tower; the logit scale is left out)."""
    from .losses import term_weights

    weights = getattr(task, "weights", None) or term_weights(task.cfg.loss_weights)  # CE-CLIP's terms too
    towers = {"text": [], "image": []}
    for name, p in task.clip.named_parameters():
        if p.requires_grad and name != "logit_scale":
            towers["image" if name.startswith("visual.") else "text"].append(p)
    with torch.enable_grad():
        out = task(batch, stats=False)
        res: dict[str, dict[str, float]] = {}
        for term, weight in weights.items():
            if term not in out:
                continue
            res[term] = {}
            for tower, params in towers.items():
                if not params:
                    continue
                grads = torch.autograd.grad(weight * out[term], params, retain_graph=True, allow_unused=True)
                res[term][tower] = float(torch.sqrt(sum((g.float() ** 2).sum() for g in grads if g is not None)
                                                    or torch.zeros(())))
    return res


def held_out_batch(task, train_cfg, tables: dict, split: str = "val", size: int = 128) -> dict | None:
    """One batch of held-out ``split`` pairs built as training builds them (masks, crops, hard negatives)."""
    from .data import build_samples, collate
    from .train import training_dataset
    from .train_config import HARDNEG_STYLES

    samples, _ = build_samples({k: Path(v) for k, v in tables.items()}, split, hard_negatives=train_cfg.hardneg,
                               seed=train_cfg.seed)
    if not samples:
        return None
    hard = None
    if train_cfg.mode in HARDNEG_STYLES:  # the hard-negative modes' slots, made as training makes them
        from .hardneg_data import build_hard_negatives

        hard = build_hard_negatives({k: Path(v) for k, v in tables.items()}, samples,
                                    HARDNEG_STYLES[train_cfg.mode], train_cfg.seed)
    ds = training_dataset(task, train_cfg, samples, split, hard=hard)
    batch = collate([ds[(0, i)] for i in range(min(size, len(samples)))])
    batch.pop("skipped")
    return batch if "image" in batch else None


def probe(model: str, checkpoint: str | None, cfg: ProbeConfig, train_checkpoint: str | None = None,
          tables: dict | None = None) -> dict:
    """Load a CLIP (an open_clip architecture + weights file, as ``macco eval``) and run every probe; with a
    run's training checkpoint and its tables (captions, token_masks, scene_graphs, regions), also the text
    predictor's reconstruction (runs that mask text) and the per-term gradient norms on one held-out batch."""
    from .benchmarks import EvalConfig, load_encoder

    enc, model_id, sha = load_encoder(EvalConfig(model=model, checkpoint=checkpoint, device=cfg.device))
    task = train_cfg = None
    if train_checkpoint:
        task, train_cfg = load_training_task(train_checkpoint, cfg.device)
    recon = task is not None and task.cfg.masks_text and tables
    rows = held_out_mask_rows(tables, cfg.splits) if recon else None
    train_rows = held_out_mask_rows(tables, ("train",)) if recon else None
    out = run_probes(enc.model, enc.preprocess, enc.tokenizer, cfg, task if recon else None, rows, train_rows)
    if task is not None and tables and "regions" in tables:
        batch = held_out_batch(task, train_cfg, tables)
        if batch is not None:
            batch = {k: v.to(cfg.device) if torch.is_tensor(v) else v for k, v in batch.items()}
            out["gradient_norms"] = term_gradient_norms(task, batch) | {"batch": len(batch["text"])}
    return {"model": model_id, "checkpoint": checkpoint, "checkpoint_sha256": sha, **out}

