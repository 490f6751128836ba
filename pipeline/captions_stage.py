"""The captions stage: an image-text source read into the ``captions`` table (+ ``errors``; MACCO's file also into
``official``). Every source is one ``SourceKind`` record in ``SOURCES`` (where it lives, how it is read, where its
images are, what its content is): adding a source is adding a record, nowhere else.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from data_schemas import TABLES, InputFileError, read_table, write_table
from data_schemas.config import ConfigError, check_choices
from data_schemas.provenance import closure_version, file_sha256
from pipeline.shards import only_stage
from pipeline.sources import Source
from pipeline.world_scene import world_identity


@dataclass
class CaptionsConfig:
    source: Source = "coco"  # a record of SOURCES
    # coco: COCO-layout root (annotations/captions_<split>2014.json + <split>2014/); in a flow config, none: the
    # synthetic world (the world stage's output)
    root: str | None = None
    splits: tuple[str, ...] = ("train", "val", "test")  # coco: which captions files
    karpathy: str | None = None  # coco: optional dataset_coco.json; then caption ids/splits come from it
    karpathy_splits: tuple[str, ...] = ("train", "restval", "val", "test")
    path: str | list[str] | None = None  # csv / folder / caption-file: the file; webdataset: shard paths or patterns
    # csv / folder: the images' folder (default: the file's folder); caption-file: the folder its file_name values
    # are relative to (a JSONL's sizes read from the images, a COCO json's missing images errors; none: neither)
    image_root: str | None = None
    # csv / folder / webdataset / caption-file: the split of every row (csv: unless csv_split_key; a JSONL line's own
    # split is kept)
    split: str = "train"
    csv_img_key: str = "filepath"  # open_clip's --csv-img-key
    csv_caption_key: str = "title"  # open_clip's --csv-caption-key
    csv_separator: str = "\t"  # open_clip's --csv-separator
    csv_split_key: str | None = None  # a column holding each row's split

    def __post_init__(self):
        check_choices(self, "data")
        needs = SOURCES[self.source].location
        if getattr(self, needs) is None and needs != "root":
            raise ConfigError(f"data.source {self.source!r} needs data.{needs}")
        self.splits, self.karpathy_splits = tuple(self.splits), tuple(self.karpathy_splits)
        if self.csv_separator in ("\\t", "tab"):  # as typed in a shell or an unquoted YAML value
            self.csv_separator = "\t"


# ---- the sources -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SourceKind:
    """One image-text source: the config field that locates it (``root`` or ``path``), its reader (config, stage
    output dir -> ``CaptionRead``), the folder its rows' ``file_name`` values are relative to, and what it holds
    (its content fingerprint, for the flow's keys)."""
    name: str
    location: str  # "root" | "path"
    read: Callable
    image_root: Callable[[CaptionsConfig, Path], str]
    fingerprint: Callable[[CaptionsConfig], list]


def _listing(root: Path) -> list:
    """(relative path, size, mtime) of every file under ``root``: what a folder of images holds."""
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in root.rglob("*") if p.is_file())


def _read_coco(cfg: CaptionsConfig, out: Path):
    from pipeline.captions import read_coco_root, read_karpathy

    if cfg.karpathy:
        base = read_coco_root(cfg.root, cfg.splits)
        sizes = {r["image_id"]: (r["width"], r["height"]) for r in base.rows}
        return read_karpathy(Path(cfg.karpathy), splits=cfg.karpathy_splits, sizes=sizes, image_root=cfg.root)
    return read_coco_root(cfg.root, cfg.splits)


def _coco_fingerprint(cfg: CaptionsConfig) -> list:
    """The annotation files' and the split folders' images' (path, size, mtime), and the Karpathy file's."""
    root = Path(cfg.root).resolve()
    anns = [(str(a), a.stat().st_size, a.stat().st_mtime_ns) for a in sorted((root / "annotations").glob("*.json"))]
    images = [_listing(root / f"{s}2014") for s in cfg.splits if (root / f"{s}2014").is_dir()]
    return [anns, images, file_sha256(cfg.karpathy) if cfg.karpathy else None]


def _file_fingerprint(cfg: CaptionsConfig) -> list:
    """A caption file's content and every image's (path, size, mtime) under its image root."""
    path = Path(cfg.path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found (data.path of source {cfg.source!r})")
    return [str(path.resolve()), file_sha256(path), _listing(Path(cfg.image_root or path.parent))]


def _webdataset_fingerprint(cfg: CaptionsConfig) -> list:
    from pipeline.sources import expand_shards

    return [(s, file_sha256(s)) for s in expand_shards(cfg.path)]


def _read_csv(cfg: CaptionsConfig, out: Path):
    from pipeline.sources import read_csv_source

    return read_csv_source(cfg.path, img_key=cfg.csv_img_key, caption_key=cfg.csv_caption_key,
                           separator=cfg.csv_separator, image_root=cfg.image_root, split=cfg.split,
                           split_key=cfg.csv_split_key)


def _read_folder(cfg: CaptionsConfig, out: Path):
    from pipeline.sources import read_folder_source

    return read_folder_source(cfg.path, image_root=cfg.image_root, split=cfg.split)


def _read_webdataset(cfg: CaptionsConfig, out: Path):
    from pipeline.sources import read_webdataset_source

    return read_webdataset_source(cfg.path, Path(out) / "images", split=cfg.split)


def _read_macco_tsv(cfg: CaptionsConfig, out: Path):
    from pipeline.macco_tsv import read_macco_tsv

    read, official = read_macco_tsv(cfg.path, cfg.image_root, cfg.split)
    read.official = official
    return read


def _read_caption_file(cfg: CaptionsConfig, out: Path):
    from pipeline.captions import read_caption_file

    return read_caption_file(cfg.path, split=cfg.split, image_root=cfg.image_root)


def _read_negclip_tsv(cfg: CaptionsConfig, out: Path):
    from pipeline.negclip_tsv import read_negclip_tsv

    return read_negclip_tsv(cfg.path, cfg.image_root, cfg.split)


def _file_images(cfg: CaptionsConfig, out: Path) -> str:
    return str(Path(cfg.image_root or Path(cfg.path).parent).resolve())


SOURCES: dict[str, SourceKind] = {s.name: s for s in (
    SourceKind("coco", "root", _read_coco, lambda cfg, out: str(Path(cfg.root).resolve()), _coco_fingerprint),
    SourceKind("csv", "path", _read_csv, _file_images, _file_fingerprint),
    SourceKind("folder", "path", _read_folder, _file_images, _file_fingerprint),
    SourceKind("webdataset", "path", _read_webdataset, lambda cfg, out: str((Path(out) / "images").resolve()),
               _webdataset_fingerprint),
    SourceKind("macco-tsv", "path", _read_macco_tsv, _file_images, _file_fingerprint),
    SourceKind("caption-file", "path", _read_caption_file, _file_images, _file_fingerprint),  # macco parse FILE's
    SourceKind("negclip-tsv", "path", _read_negclip_tsv, _file_images, _file_fingerprint),
)}


def captions_image_root(cfg: CaptionsConfig, out: Path) -> str:
    """The folder the captions table's ``file_name`` values are relative to (what ground and train read)."""
    return SOURCES[cfg.source].image_root(cfg, Path(out))


def source_fingerprint(cfg: CaptionsConfig) -> list:
    """What the configured source holds (its files' content or size and time): part of the captions key."""
    return SOURCES[cfg.source].fingerprint(cfg)


def read_source(cfg: CaptionsConfig, out: Path):
    """The configured source as a ``CaptionRead`` (webdataset images extracted under ``out/images``; MACCO's
    file: with its ``official`` rows as ``.official``)."""
    return SOURCES[cfg.source].read(cfg, Path(out))


def captions_stage(cfg: CaptionsConfig, out: Path) -> dict[str, dict]:
    """Read the source (COCO, the world, CSV/TSV, image folder, webdataset, MACCO's file, NegCLIP's file) into
    ``out/captions`` + ``out/errors`` (+ ``out/official``; NegCLIP's: + ``out/negative_captions``,
    ``out/image_neighbours``)."""
    if getattr(cfg, SOURCES[cfg.source].location) is None:
        raise ConfigError(f"data.source {cfg.source!r} needs data.{SOURCES[cfg.source].location}")
    read = read_source(cfg, out)
    conf, ver = asdict(cfg), closure_version(__name__)
    world = world_identity(cfg.root) if cfg.source == "coco" else None  # the synthetic world it was read from
    written = {
        "captions": write_table(TABLES["captions"], out / "captions", TABLES["captions"].from_rows(read.rows),
                                config=conf, code_version=ver,
                                extra={"summary": read.summary(), **({"inputs": {"world": world}} if world else {})}),
        "errors": write_table(TABLES["errors"], out / "errors", TABLES["errors"].from_rows(read.errors),
                              config=conf, code_version=ver, replaces=only_stage("captions")),
    }
    if cfg.source == "macco-tsv":
        written["official"] = write_table(TABLES["official"], out / "official",
                                          TABLES["official"].from_rows(read.official), config=conf, code_version=ver)
    for name, rows in read.tables.items():  # negclip-tsv: negative_captions, image_neighbours (as the file gives them)
        written[name] = write_table(TABLES[name], out / name, TABLES[name].from_rows(rows), config=conf,
                                    code_version=ver)
    refuse_empty(cfg, out, len(read.rows), read.errors)
    return written


def refuse_empty(cfg: CaptionsConfig, out: Path, rows: int, errors: list[dict]) -> None:
    """A source that gave no usable pair is refused here, the first stage that sees it, in one line (its error rows
    are already written, for ``macco sql``): every image missing names the folder looked in; else the reasons."""
    if rows:
        return
    where = cfg.root if SOURCES[cfg.source].location == "root" else cfg.path
    if not errors:
        raise InputFileError(f"data.source {cfg.source} ({where}): the source holds no image-text pair")
    reasons: dict[str, int] = {}
    for e in errors:
        reasons[e["reason"]] = reasons.get(e["reason"], 0) + 1
    if set(reasons) == {"missing_image"}:
        hint = "" if cfg.image_root or cfg.source in ("coco", "webdataset") else \
            " (the file's folder: pass --image-root DIR / data.image_root where its image paths start)"
        raise InputFileError(f"none of the {len(errors)} captions' images was found under "
                             f"{captions_image_root(cfg, out)}{hint}")
    first = errors[0]
    raise InputFileError(f"data.source {cfg.source} ({where}): 0 usable pairs, {len(errors)} rows refused ("
                         + ", ".join(f"{k}={v}" for k, v in sorted(reasons.items()))
                         + f"; first: {first['item_id']}: {first['message']}); the rows: {Path(out) / 'errors'}")


def read_caption_input(path: str | Path, *, split: str | None = None,
                       image_root: str | Path | None = None) -> list[dict]:
    """Caption rows from a captions table dir, a COCO captions json, or a JSONL of {id, image_id, caption}.

    A file's rows get ``split`` (default: from a ``captions_<split>2014`` name, else ``train``) and, with
    ``image_root``, sizes read from the images (``pipeline.captions.read_caption_file``). Bad items of a file
    are left out here; ``read_caption_file`` returns them as error rows (what ``macco parse`` writes).
    """
    from pipeline.captions import read_caption_file, split_of

    path = Path(path)
    if path.is_dir():
        return read_table(TABLES["captions"], path).to_pylist()
    return read_caption_file(path, split=split_of(path, split)[0], image_root=image_root).rows
