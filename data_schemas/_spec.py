"""The table contract's core: a ``TableSpec`` (schema, key, version, checks), the errors a table or an input
file raises, and the content hashes the manifests record."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa

MANIFEST = "manifest.json"


class InputFileError(ValueError):
    """A malformed or inconsistent input (a file, a table on disk); the message names the file and the field,
    line or value. The ``macco`` command prints it as one line (exit 2) instead of a traceback."""


def read_text(path: Path) -> str:
    """A text input file; not UTF-8 (a Latin-1 file: the codec's message names no file) is an ``InputFileError``
    naming the file and the first bad byte."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}): "
                             "save it as UTF-8") from None


def load_json(path: str | Path) -> Any:
    """A JSON input file: missing -> FileNotFoundError; malformed, not UTF-8 or nested too deep -> InputFileError;
    each naming the file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: file not found")
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{path}: not valid JSON ({exc})") from exc
    except RecursionError:  # [[[...]]] thousands deep: the decoder's stack, not a bug of ours
        raise InputFileError(f"{path}: JSON nested too deep to read") from None


class TableError(InputFileError):
    """A table on disk is missing, incomplete, damaged or does not match its schema."""


@dataclass(frozen=True)
class Check:
    """A DuckDB check: ``sql`` selects the offending rows (zero rows = pass).

    The SQL may name any table by its name (a view over its Parquet parts) and use ``{param}`` placeholders
    filled from the thresholds given to the runner.
    """

    name: str
    sql: str
    needs: tuple[str, ...] = ()  # other tables the query joins
    key: tuple[str, ...] = ()  # columns shown as example keys (defaults to the table key)


@dataclass(frozen=True)
class TableSpec:
    name: str
    schema: pa.Schema
    key: tuple[str, ...]
    version: int
    checks: tuple[Check, ...] = field(default_factory=tuple)

    @property
    def arrow_schema(self) -> pa.Schema:
        return self.schema.with_metadata({"table": self.name, "schema_version": str(self.version)})

    def not_null(self) -> list[str]:
        return [f.name for f in self.schema if not f.nullable]

    def from_rows(self, rows: list[dict[str, Any]]) -> pa.Table:
        """Build a typed table from row dicts, naming the table/column/value on a type error."""
        try:
            table = pa.Table.from_pylist(rows, schema=self.arrow_schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise TableError(f"table {self.name}: rows do not match the schema: {exc}") from exc
        self.assert_conforms(table)
        return table

    def assert_conforms(self, table: pa.Table) -> None:
        for col in self.schema.names:
            if col not in table.column_names:
                raise TableError(f"table {self.name}: missing column {col!r} ({self.schema.field(col).type})")
        for name in self.not_null():
            nulls = table.column(name).null_count
            if nulls:
                raise TableError(f"table {self.name}: column {name!r} is non-nullable but has {nulls} nulls")


def _sha256_files(paths: Iterable[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode())
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
