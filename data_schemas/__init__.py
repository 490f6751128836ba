"""Table schemas, their DuckDB checks, and the shared Parquet read/write (no torch/spacy/prefect here)."""
from . import captions, errors, eval_results, official, patch_masks, regions, scene_graphs, token_masks
from ._io import (ROWS_PER_PART, ShardedTableWriter, append_table, apply_umask, replace_file, table_lock, temp_name,
                  write_table)
from ._read import is_complete, read_manifest, read_table, refuse_unreadable, table_files, verify_table
from ._spec import Check, InputFileError, TableError, TableSpec, load_json, read_text

TABLES: dict[str, TableSpec] = {m.SPEC.name: m.SPEC for m in (
    captions, scene_graphs, token_masks, regions, patch_masks, errors, eval_results, official)}

__all__ = ["TABLES", "Check", "TableSpec", "TableError", "InputFileError", "ShardedTableWriter", "write_table",
           "ROWS_PER_PART", "append_table", "table_lock", "read_table", "read_manifest", "is_complete", "verify_table",
           "refuse_unreadable", "table_files", "apply_umask", "load_json", "read_text", "replace_file", "temp_name"]
