"""A benchmark file's records checked as data: every field a loader reads is of the type it needs, else one
``InputFileError`` naming the file, the record and the value (a caption of 5, a null file name, a bbox of "left"
or NaN, a string where a record goes were tracebacks deep in scoring, after the model had loaded)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from data_schemas import InputFileError, load_json


def _shown(v: Any) -> str:
    return f"{str(v)[:40]!r} ({type(v).__name__})" if v is not None else "null"


def record(rec: Any, path: Path, where: str, text=(), numbers=(), texts=()) -> dict:
    """``rec`` (record ``where`` of ``path``) as {field: value} for the fields named: ``text`` non-empty strings
    (captions, image names), ``numbers`` finite numbers (bbox fields), ``texts`` non-empty lists of non-empty
    strings (caption options); a missing field, a record that is not an object, or a value of another type is one
    line naming all three."""
    if not isinstance(rec, dict):
        raise InputFileError(f"{path}: {where}: {_shown(rec)} is not a record (an object with "
                             f"{', '.join(map(repr, (*text, *numbers, *texts)))})")
    out = {}
    for f in (*text, *numbers, *texts):
        if f not in rec:
            raise InputFileError(f"{path}: {where}: missing field {f!r}")
        out[f] = v = rec[f]
        if f in text and not _is_text(v):
            raise InputFileError(f"{path}: {where}: field {f!r} is {_shown(v)}, not text")
        if f in numbers and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
            raise InputFileError(f"{path}: {where}: field {f!r} is {_shown(v)}, not a finite number")
        if f in texts and not (isinstance(v, list) and v and all(map(_is_text, v))):
            raise InputFileError(f"{path}: {where}: field {f!r} is {_shown(v)}, not a list of texts")
    return out


def _is_text(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


def texts(values: Any, path: Path, where: str) -> list[str]:
    """A list of non-empty strings (a record that is a list, e.g. What's Up's QA ``[id, correct, wrong]``)."""
    if not (isinstance(values, list) and values and all(map(_is_text, values))):
        raise InputFileError(f"{path}: {where}: {_shown(values)}, not a list of texts")
    return values


def record_list(path: Path) -> list:
    """A benchmark file that is a JSON list of records (ARO, What's Up)."""
    data = load_json(path)
    if not isinstance(data, list):
        raise InputFileError(f"{path}: a list of records expected, got {type(data).__name__}")
    return data

