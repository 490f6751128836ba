"""The DAG as records, in order: the data source, the preprocessing ``Stage`` records of ``flows.dag``, then the
validate gate, training (the base chain, then every run x seed), evaluation (every model on every benchmark set;
the probes on the synthetic world) and the report. Each ``Node`` runs from a ``Plan`` — the config, the runner
(``flows.pipeline._Runner``: which stages are selected, done, forced, locked) and the ``Catalog`` of what the nodes
before it made — and names the modules whose source is its code version beside its code. ``macco_pipeline`` is a
loop over ``DAG``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from data_schemas.provenance import code_version
from flows.catalog import Catalog
from flows.config import base_sections, key_of, use_built_folder
from flows.dag import BY_NAME, PREPROCESSING, Stage, folder_key

HISTORY = "eval_results"  # artifacts/eval_results: every evaluation's rows, appended (never replaced)


@dataclass
class Plan:
    """One run of the DAG: its config, runner and catalog, and what each node returned (``out``)."""
    cfg: dict
    runner: Any  # flows.pipeline._Runner
    catalog: Catalog = field(default_factory=Catalog)
    out: dict = field(default_factory=dict)

    @property
    def world_run(self) -> bool:
        """The data is the synthetic world (the embedded default): no data root given."""
        data = self.cfg["data"]
        return data["source"] == "coco" and data["root"] is None


@dataclass(frozen=True)
class Node:
    name: str
    run: Callable[[Plan], Any]  # the node's work; what it returns is the flow's result for it
    code: Callable[[Plan], tuple[str, ...]] = lambda p: ()  # the modules whose source is its code version
    when: Callable[[Plan], bool] | None = None  # whether it runs at all (None: always)


# ---- the source and the preprocessing stages ---------------------------------------------------------------
def source_fingerprint(data: dict) -> str:
    """What a user's source holds (the captions and ground keys cover it). COCO: the annotation files' and
    the split folders' images' (path, size, mtime); CSV and image folders: the file's content and every image's
    (path, size, mtime); webdataset: the shards' content."""
    from model.export import file_sha256
    from pipeline.sources import expand_shards

    def listing(root: Path) -> list:
        return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                      for p in root.rglob("*") if p.is_file())

    if data["source"] == "coco":  # the annotation files and the split folders' images
        root = Path(data["root"]).resolve()
        anns = sorted((root / "annotations").glob("*.json"))
        images = [listing(root / f"{split}2014") for split in data["splits"] if (root / f"{split}2014").is_dir()]
        return key_of([(str(a), a.stat().st_size, a.stat().st_mtime_ns) for a in anns], images)
    if data["source"] == "webdataset":
        return key_of([(s, file_sha256(s)) for s in expand_shards(data["path"])])
    path = Path(data["path"])
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found (data.path of source {data['source']!r})")
    return key_of(str(path.resolve()), file_sha256(path), listing(Path(data["image_root"] or path.parent)))


def _source(p: Plan) -> dict:
    """The synthetic world (a stage of its own), or the fingerprint of the user's data (``source_fingerprint``)."""
    if p.world_run:
        p.catalog.manifests["source"] = p.runner.stage(BY_NAME["world"], p.catalog)
        return p.catalog.manifests["source"]
    p.catalog.manifests["source"] = {"content_hash": source_fingerprint(p.cfg["data"])}
    return None


def _preprocessing(stage: Stage) -> Node:
    def run(p: Plan) -> dict:
        m = p.catalog.manifests[stage.name] = p.runner.stage(stage, p.catalog)
        if stage.name == "tokenizer":  # the later stages read the model folder it built
            p.runner.cfg = p.cfg = use_built_folder(p.cfg, m["folder"])
        return m

    when = (lambda p: stage.when(p.cfg[stage.section])) if stage.when is not None else None
    return Node(stage.name, run, lambda p: stage.code(p.cfg[stage.section]), when)


# ---- validate: the gate ------------------------------------------------------------------------------------
def _validate_code(p: Plan) -> tuple[str, ...]:
    from pipeline.validate import CODE_MODULES

    return CODE_MODULES


def _validate(p: Plan) -> dict:
    from flows.tasks import validate_task

    c = p.catalog
    # the stages' content hashes cover their data tables, not their errors tables, which the gate also checks
    key = key_of("validate", *(c.hash(s) for s in ("captions", "parse", "ground", "masks")),
                 *c.error_hashes(), p.cfg["validate"], code_version(*_validate_code(p)))
    return p.runner.call("validate", validate_task, p.runner.dir("validate", key), key, tables=c.mask_tables(),
                         params=p.cfg["validate"]["params"])


# ---- train: the base chain, then every run x seed from the base's export ---------------------------------
def _train_code(p: Plan) -> tuple[str, ...]:
    from model.train import code_modules

    return code_modules()


def weights_key(pretrained: str | None) -> str | None:
    """A weights file's sha256 (a file replaced at the same path is new weights), else the name (an open_clip
    pretrained tag) or None."""
    from model.export import file_sha256

    return file_sha256(pretrained) if pretrained and Path(pretrained).is_file() else pretrained


def train_settings(p: Plan, over: dict, seed: int, init: dict | None) -> tuple[dict, str]:
    """(a run's training settings, its key): ``train.common`` under ``over``, the tables and image root from the
    catalog, the weights of ``init`` (the previous base stage) or ``train.pretrained``. Not in the key: paths, and
    how a run is checkpointed and resumed (the same run either way)."""
    from model.export import file_sha256

    tcfg, c = p.cfg["train"], p.catalog
    arch = over.get("arch", tcfg["common"].get("arch", tcfg["arch"]))  # as flows.config.run_archs
    s = {**tcfg["common"], **over, "arch": arch, "seed": seed, "tables": c.training_tables(), "image_root": c.root}
    if init is not None:
        s["pretrained"] = init["export_pt"]
    elif tcfg["pretrained"]:
        s["pretrained"] = tcfg["pretrained"]
    # source: the data root's content (the world's scene truth, which mode scene reads, and its images)
    k = key_of("train", {a: b for a, b in s.items()
                         if a not in ("tables", "image_root", "pretrained", "resume", "save_every")},
               c.table_hashes(), init["content_hash"] if init else weights_key(s.get("pretrained")),
               code_version(*_train_code(p)), c.hash("source"),
               file_sha256(s["scenes"]) if s.get("scenes") else None, *folder_key(s["arch"]))
    return s, k


def _train(p: Plan) -> dict[str, list[dict]]:
    from flows.tasks import train_task

    tcfg, r = p.cfg["train"], p.runner
    runs: dict[str, list[dict]] = {}
    base = None
    bases = base_sections(tcfg["base"])
    for i, section in enumerate(bases):  # a chain: each base stage starts from the previous one's export
        name = "base" if i == len(bases) - 1 else f"base{i + 1}-{section.get('mode', 'macco')}"
        s, k = train_settings(p, section, int(section.get("seed", 0)), base)
        base = r.call("train", train_task, r.art / "runs" / f"{name}-{k}", k, name=name, settings=s,
                      nproc=tcfg["torchrun_nproc"])
    if base is not None:
        runs["base"] = [base]
    for name, over in tcfg["runs"].items():
        seeds = over.get("seeds", tcfg["seeds"])  # a run may have its own seeds
        over = {a: b for a, b in over.items() if a != "seeds"}
        for seed in seeds:
            s, k = train_settings(p, over, seed, base)
            runs.setdefault(name, []).append(
                r.call("train", train_task, r.art / "runs" / f"{name}-s{seed}-{k}", k, name=f"{name}-s{seed}",
                       settings=s, nproc=tcfg["torchrun_nproc"]))
    return runs


# ---- evaluate: every model on every benchmark set (and on the world the probes) --------------------------
def _evaluate_code(p: Plan) -> tuple[str, ...]:
    from model.benchmarks.registry import code_modules

    return code_modules()  # the harness and every registered benchmark's rule


def benchmark_roots(p: Plan) -> tuple[dict, str]:
    """(benchmark -> root, their content key): ``evaluate.roots``, or the synthetic world's own sets."""
    ecfg = p.cfg["evaluate"]
    if ecfg["roots"]:
        roots, roots_hash = dict(ecfg["roots"]), key_of(sorted(ecfg["roots"].items()))
    elif p.world_run:
        from pipeline.world_benchmarks import benchmark_roots as world_roots

        roots, roots_hash = world_roots(p.catalog.root), p.catalog.hash("source")
    else:
        from data_schemas.config import ConfigError

        raise ConfigError("config evaluate.roots: name the benchmark roots to evaluate on (only the synthetic "
                          "world brings its own), or leave 'evaluate' out of the stages")
    if ecfg["benchmarks"] != "all":
        roots = {b: roots[b] for b in ecfg["benchmarks"]}
    return roots, roots_hash


def _evaluate(p: Plan) -> dict[str, list[dict]]:
    from flows.tasks import evaluate_task

    ecfg, r, c, runs = p.cfg["evaluate"], p.runner, p.catalog, p.out["train"]
    roots, roots_hash = benchmark_roots(p)
    eval_cfg = {**ecfg["settings"], "roots": roots}
    if not ecfg["roots"]:  # the synthetic world's sets hold a few files of each benchmark: partial groups by design
        eval_cfg.setdefault("allow_partial", True)
    # the probes need the world's scene truth (on the synthetic world only); they read the tables and rebuild a
    # run's training task from its checkpoint
    probe_cfg = {"world": c.root, "tables": c.training_tables()} if p.world_run and ecfg["probes"] else None
    probe_key = (sorted(probe_cfg["tables"]), c.table_hashes(), c.hash("source"), code_version("model.probes"),
                 code_version(*_train_code(p))) if probe_cfg else None
    evals: dict[str, list[dict]] = {}
    for label in (list(runs) if ecfg["models"] == "all" else list(ecfg["models"])):
        for run in runs[label]:
            k = key_of("evaluate", run["content_hash"], {**ecfg["settings"], "roots": sorted(roots)}, roots_hash,
                       code_version(*_evaluate_code(p)), probe_key)
            evals.setdefault(label, []).append(
                r.call("evaluate", evaluate_task, r.dir("evaluate", k), k, label=run["name"], run=run,
                       eval_cfg=eval_cfg, history=str(r.art / HISTORY), probe_cfg=probe_cfg))
    return evals


# ---- report ------------------------------------------------------------------------------------------------
def _report(p: Plan) -> dict:
    from flows.tasks import report_task

    runs, cfg = p.out["train"], p.cfg
    counts = sorted({len(v) for k, v in runs.items() if k != "base"})
    n_seeds = "/".join(map(str, counts))
    note = (f"Synthetic world, {n_seeds} seed{'s' if counts != [1] else ''} per fine-tune "
            f"({'mean ± sd over seeds' if counts != [1] else 'a single seed: no spread estimate'}).")
    rep = report_task(p.out["evaluate"], str(p.runner.art / "runs" / cfg["name"]), f"{cfg['name']}: base vs "
                      "fine-tunes", note, cfg["evaluate"]["control"])
    print(Path(rep["markdown"]).read_text())
    return rep


DAG: tuple[Node, ...] = (
    Node("world", _source, lambda p: BY_NAME["world"].code(p.cfg["world"])),
    *(_preprocessing(s) for s in PREPROCESSING[1:]),
    Node("validate", _validate, _validate_code),
    Node("train", _train, _train_code),
    Node("evaluate", _evaluate, _evaluate_code),
    Node("report", _report),
)
