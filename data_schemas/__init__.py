"""Table schemas, their DuckDB checks, and the shared Parquet read/write (no torch/spacy/prefect here).

The schema modules (``data_schemas.<table>``) are not imported here: code that uses one table imports its module,
and code that goes by a table's name reads ``TABLES[name]`` (the module imported on use). So a stage's code version
covers the schemas it uses and the tables it reads and writes (``flows.stage.code_roots``), not every schema."""
from __future__ import annotations

import importlib
from collections.abc import Mapping

from ._io import (ROWS_PER_PART, ShardedTableWriter, append_table, apply_umask, lock_file, made_from, replace_file,
                  table_lock, temp_name, write_table)
from ._read import is_complete, read_manifest, read_table, refuse_unreadable, table_files, verify_table
from ._spec import Check, InputFileError, TableError, TableSpec, load_json, read_text

TABLE_NAMES = ("captions", "scene_graphs", "token_masks", "regions", "patch_masks", "errors", "eval_results", "official",
               "image_neighbours", "negative_captions")


def table_module(name: str):
    """The schema module of table ``name`` (``data_schemas.<name>``), imported on use."""
    if name not in TABLE_NAMES:
        raise KeyError(name)
    return importlib.import_module(f"{__name__}.{name}")


class _Tables(Mapping):
    """table name -> its ``TableSpec``, each schema module imported when its table is first asked for."""

    def __getitem__(self, name: str) -> TableSpec:
        return table_module(name).SPEC

    def __iter__(self):
        return iter(TABLE_NAMES)

    def __len__(self) -> int:
        return len(TABLE_NAMES)


TABLES: Mapping[str, TableSpec] = _Tables()

__all__ = ["TABLES", "TABLE_NAMES", "table_module", "Check", "TableSpec", "TableError", "InputFileError",
           "ShardedTableWriter", "write_table", "lock_file", "made_from", "ROWS_PER_PART", "append_table", "table_lock",
           "read_table", "read_manifest", "is_complete", "verify_table", "refuse_unreadable", "table_files",
           "apply_umask", "load_json", "read_text", "replace_file", "temp_name"]
