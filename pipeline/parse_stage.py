"""The parse stage: every caption's scene graph (relation, attribute and object concepts) and its CLIP token
masks (``scene_graphs``, ``token_masks``, ``errors``), sharded by caption (``pipeline.shards.run_sharded``): a
killed stage redoes only its unfinished shards."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from data_schemas.config import ConfigError, check_choices, check_ranges, unkeyed
from data_schemas.geometry import DEFAULT_ARCH
from data_schemas.provenance import closure_version
from data_schemas.scene_graphs import SPACY_MODEL
from pipeline.shards import only_stage, run_sharded


@dataclass
class ParseConfig:
    # sng: SceneGraphParser (the sng extra); official: the word lists of MACCO's file (data.source macco-tsv)
    parser: Literal["rules", "sng", "official"] = "rules"
    spacy_model: str = SPACY_MODEL
    clip_model: str = DEFAULT_ARCH  # whose tokenizer the token masks use
    context_length: int | None = None  # None: the tokenizer's own (CLIP BPE: 77; SigLIP B/16: 64)
    batch_size: int = unkeyed(256)  # unkeyed: how spaCy's work is spread (the key, the shard fingerprint)
    n_process: int = unkeyed(1)
    shard_size: int = unkeyed(2000)

    def __post_init__(self):
        check_choices(self, "parse")
        check_ranges(self, "parse", positive=("context_length", "batch_size", "n_process", "shard_size"))


def _parse_rows(cfg: ParseConfig, rows: list[dict], loaded: dict) -> dict[str, list[dict]]:
    """Scene graphs, token masks and errors of ``rows`` in this process; models load into ``loaded`` once (the
    official parser reads ``loaded["official"]``: {caption_id: official row})."""
    from pipeline.scene_graph import load_nlp, parse_captions
    from pipeline.sng import make_sng
    from pipeline.tokens import token_mask_rows

    if cfg.parser == "official":
        from pipeline.macco_tsv import official_graphs

        sg, errors, graphs = official_graphs(rows, loaded["official"], cfg.clip_model)
        tm, tm_err = token_mask_rows(rows, graphs, cfg.clip_model, cfg.context_length)
        return {"scene_graphs": sg, "token_masks": tm, "errors": errors + tm_err}
    if not loaded:
        loaded["nlp"] = load_nlp(cfg.spacy_model)
        loaded["sng"] = make_sng(cfg.spacy_model) if cfg.parser == "sng" else None
    res = parse_captions(rows, loaded["nlp"], parser=cfg.parser, batch_size=cfg.batch_size, sng=loaded["sng"])
    tm, tm_err = token_mask_rows(rows, res.graphs, cfg.clip_model, cfg.context_length)
    return {"scene_graphs": res.rows, "token_masks": tm, "errors": res.errors + tm_err}


_WORKER_MODELS: dict = {}  # per worker process: the models _parse_rows loaded there


def _parse_chunk(job: tuple[ParseConfig, list[dict]]) -> dict[str, list[dict]]:
    cfg, rows = job
    return _parse_rows(cfg, rows, _WORKER_MODELS)


def parse_stage(cfg: ParseConfig, captions: list[dict], out: Path, progress=None, only=None,
                finalize: bool = True, reuse: bool = False, inputs: str | None = None,
                official: list[dict] | None = None) -> dict[str, dict]:
    """Scene graphs + CLIP token masks for ``captions``: ``out/{scene_graphs,token_masks,errors}``.

    ``inputs``: a content hash of ``captions`` when the caller has one (the flow: the captions table's), else
    computed; unfinished shards of a killed run are reused only with the same inputs.

    With ``n_process > 1`` each shard is split into chunks that worker processes parse end to end (spaCy,
    rules, token alignment) and return as rows, in order: only plain rows cross processes, never spaCy Docs
    (whose serialisation is what ``nlp.pipe(n_process=...)`` pays for). Workers start like spaCy's own, with
    multiprocessing's default start method, once per call and only if a shard needs work. ``parser: official``
    takes the concepts from ``official`` (the ``official`` table's rows: MACCO's file), in this process.
    """
    import multiprocessing

    loaded: dict = {}
    if cfg.parser == "official":
        if official is None:
            raise ConfigError("parse.parser 'official' reads the official table of a macco-tsv source "
                              "(data.source: macco-tsv / macco captions --source macco-tsv)")
        loaded["official"] = {r["caption_id"]: r for r in official}

    def shard(rows: list[dict]) -> dict[str, list[dict]]:
        if cfg.n_process <= 1 or cfg.parser == "official":
            return _parse_rows(cfg, rows, loaded)
        if "pool" not in loaded:
            loaded["pool"] = multiprocessing.Pool(cfg.n_process)
        step = max(1, min(cfg.batch_size, -(-len(rows) // cfg.n_process)))
        merged: dict[str, list[dict]] = {"scene_graphs": [], "token_masks": [], "errors": []}
        jobs = [(cfg, rows[i:i + step]) for i in range(0, len(rows), step)]
        for part in loaded["pool"].imap(_parse_chunk, jobs):
            for name, part_rows in part.items():
                merged[name].extend(part_rows)
        return merged

    ver = closure_version(__name__)
    try:
        return run_sharded(captions, cfg.shard_size,
                           {n: out / n for n in ("scene_graphs", "token_masks", "errors")}, shard,
                           config=cfg, version=ver, progress=progress, only=only, finalize=finalize,
                           reuse=reuse, inputs=inputs, replaces={"errors": only_stage("parse")})
    finally:
        if "pool" in loaded:
            loaded["pool"].terminate()
            loaded["pool"].join()
