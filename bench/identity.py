"""Behaviour fingerprint of the code in the current directory (for refactors that must change nothing): the tiny
pipeline (configs/tiny.yaml) run end to end into ARTIFACTS, then every table's content hash, every
training export's sha256, every evaluation's scores (results.json without times and ids), and the loss terms and
gradient norms of one step of every training mode on a fixed batch. Run it from the root of a checkout of each of
two commits (the code comes from the current directory, here and in any subprocess) and diff the JSON:

    python bench/identity.py /tmp/before > before.json   (in a clone of the old commit)
    python bench/identity.py /tmp/after > after.json
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import yaml

# the code under test is the one in the current directory (not an installed copy: an editable install of
# another clone would otherwise answer the imports)
sys.path.insert(0, str(Path.cwd()))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path.cwd()), os.environ.get("PYTHONPATH")]))


def _scores(res: dict) -> dict:
    """results.json without what differs between two runs of the same evaluation (times, ids, paths)."""
    drop = {"seconds", "eval_id", "created", "code_version", "checkpoint", "root", "dir", "image_root"}

    def clean(x):
        if isinstance(x, dict):
            return {k: clean(v) for k, v in sorted(x.items()) if k not in drop}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x
    return clean(res)


def step_terms(root: Path) -> dict:
    """One step of each mode on the same batch of the run's tables: every loss term and the gradient norm of every
    parameter group, from a fixed initialisation."""
    from model.train import load_config, setup
    from model.train_step import train_step

    tables = next(root.glob("runs/macco-s0-*/run/config.json"))
    base = json.loads(tables.read_text())
    out = {}
    for mode in ("macco", "clip-ft", "text-only", "image-only", "scene", "lm"):
        extra = {"mode": mode, "max_steps": 1, "out_dir": str(root / f"identity-{mode}"), "resume": None,
                 "pretrained": None, "batch_size": 8, "workers": 0}
        cfg = load_config(None, [], **{**base, **extra})
        state = setup(cfg)
        batch = next(iter(state.loader))
        batch.pop("skipped")
        grads: dict = {}
        real_step = state.scaler.step  # the gradients as the optimiser sees them (zeroed after the step)

        def step(opt, real_step=real_step, task=state.task, grads=grads):
            grads.update({n: None if p.grad is None else float(p.grad.norm()) for n, p in task.named_parameters()})
            return real_step(opt)

        state.scaler.step = step
        terms, _ = train_step(state, batch, 0, stats=True)
        h = hashlib.sha256(json.dumps(grads, sort_keys=True).encode()).hexdigest()
        after = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in state.task.parameters())).hexdigest()
        out[mode] = {"terms": {k: float(v) for k, v in sorted(terms.items())}, "grad_norms_sha256": h,
                     "params_after_step_sha256": after}
    return out


def main(artifacts: str) -> dict:
    os.environ.setdefault("PREFECT_HOME", str(Path(artifacts).resolve() / ".prefect-home"))
    os.environ.setdefault("PREFECT_RESULTS_LOCAL_STORAGE_PATH", str(Path(artifacts).resolve() / ".results"))
    cfg = yaml.safe_load(Path("configs/tiny.yaml").read_text())
    cfg["artifacts"] = str(Path(artifacts).resolve())
    Path(artifacts).mkdir(parents=True, exist_ok=True)
    conf = Path(artifacts) / "tiny.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    from flows.pipeline import run_flow

    run_flow(str(conf))
    root = Path(artifacts)
    tables = {}
    for m in sorted(root.rglob("manifest.json")):
        if "eval_results" in m.parts:
            continue
        man = json.loads(m.read_text())
        tables[f"{m.parent.parent.parent.name}/{m.parent.name}"] = man["content_hash"]
    exports = {p.parents[1].name.rsplit("-", 1)[0]: hashlib.sha256(p.read_bytes()).hexdigest()
               for p in sorted(root.glob("runs/*/run/export.pt"))}
    evals = {}
    for p in sorted(root.glob("evaluate/*/results.json")):
        r = json.loads(p.read_text())
        evals[r["label"]] = hashlib.sha256(json.dumps(_scores(r), sort_keys=True, default=str).encode()).hexdigest()
    report = (root / "runs" / "tiny" / "results.md").read_text()
    return {"tables": tables, "exports": exports, "evaluations": evals,
            "report_sha256": hashlib.sha256(report.encode()).hexdigest(), "steps": step_terms(root)}


if __name__ == "__main__":
    json.dump(main(sys.argv[1]), sys.stdout, indent=1, sort_keys=True)
