"""R4's learning curve: the reconstruction probe (direction words, filler, relation, attribute, each beside the
captions' image-free baseline) at every saved checkpoint of the given training runs, on the held-out (val + test)
captions. Usage (from the repository root):

    python docs/experiments/r4_curve.py ARTIFACTS RUN_DIR [RUN_DIR ...] > curve.json

ARTIFACTS: the flow's artifacts folder (its world and tables); RUN_DIR: a run folder (artifacts/runs/<name>-<key>).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))


def tables_of(artifacts: Path) -> tuple[dict, Path]:
    """The training tables and the world folder of a flow's artifacts (the newest of each)."""
    from pipeline.validate import discover_tables

    found = discover_tables(artifacts)
    tables = {t: found[t] for t in ("captions", "token_masks", "scene_graphs", "regions")}
    world = next(p for p in sorted((artifacts / "world").iterdir()) if (p / "world.json").is_file())
    return tables, world


def curve(artifacts: Path, runs: list[Path]) -> dict:
    import open_clip

    from model.factory import register_model_configs
    from model.probes import held_out_mask_rows, load_world, masked_word_accuracy, tokenizer_encode
    from model.probes_recon import breakdown, caption_baseline, direction_classes

    register_model_configs()
    tables, world = tables_of(artifacts)
    rows, train_rows = held_out_mask_rows(tables), held_out_mask_rows(tables, ("train",))
    _, _, preprocess = open_clip.create_model_and_transforms("macco-tiny")
    classes = direction_classes(tokenizer_encode(open_clip.get_tokenizer("macco-tiny")))
    paths = {sc["image_id"]: sc["path"] for sc in load_world(world)[1]}
    rows = [r for r in rows if r["image_id"] in paths]
    out = {"image_free": breakdown(caption_baseline(train_rows, rows), classes), "runs": {}}
    from model.probes import load_training_task

    for run in runs:
        points = {}
        for ck in sorted((run / "run" / "checkpoints").glob("step-*.pt")):
            task, _ = load_training_task(ck)
            points[int(ck.stem.split("-")[1])] = masked_word_accuracy(task, preprocess, rows, paths, classes=classes)
        out["runs"][run.name] = points
    return out


if __name__ == "__main__":
    json.dump(curve(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]), sys.stdout, indent=1)
