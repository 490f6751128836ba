"""Table ``eval_results``: the evaluation history, one row per benchmark subset of one evaluation.

The table is append-only (``data_schemas.append_table``): every evaluation adds one part, one ``eval_id`` shared
by its rows, and nothing replaces earlier rows. A row names what was evaluated and how, so runs can be told
apart and compared over time: ``run`` (the flow's run name, e.g. ``macco-s0``, or the user's label), the
checkpoint's sha256, ``config_key`` (a hash of every evaluation setting), ``protocol`` / ``activation``, the
evaluation code's version and ``created`` (UTC, microseconds).

Schema version 1 (before the history: no eval_id, run, config_key, protocol, activation, code_version) is still
read: ``LEGACY_SPEC`` checks its files and ``legacy_select`` maps its rows onto this schema (``run`` = its
``model_id``); ``upgrade_v1`` does the same in Arrow when a version-1 table is appended to.
"""
import pyarrow as pa

from ._spec import Check, TableSpec

SCHEMA = pa.schema([
    pa.field("eval_id", pa.string(), nullable=False),  # one per evaluation (a uuid), shared by its rows
    pa.field("run", pa.string(), nullable=False),  # base, clip-ft-s0, macco-s0, or the user's --run label
    pa.field("benchmark", pa.string(), nullable=False),
    pa.field("subset", pa.string(), nullable=False),
    pa.field("model_id", pa.string(), nullable=False),  # the architecture / local-dir model evaluated
    pa.field("n", pa.int64(), nullable=False),
    pa.field("correct", pa.int64(), nullable=False),
    pa.field("accuracy", pa.float64()),
    pa.field("ties", pa.int64(), nullable=False),
    pa.field("missing_images", pa.int64(), nullable=False),
    pa.field("checkpoint_sha256", pa.string(), nullable=False),
    pa.field("config", pa.string(), nullable=False),  # every evaluation setting, JSON
    pa.field("config_key", pa.string(), nullable=False),  # sha256 (16 hex) of ``config``
    pa.field("protocol", pa.string(), nullable=False),
    pa.field("activation", pa.string(), nullable=False),
    pa.field("code_version", pa.string(), nullable=False),  # the evaluation code's version
    pa.field("created", pa.string(), nullable=False),  # UTC, e.g. 2026-12-03T04:05:06.123456Z
])

CHECKS = (
    Check("eval_results.key_unique",
          "select eval_id, benchmark, subset, count(*) as n from eval_results group by all having n > 1"),
    Check("eval_results.accuracy_in_unit_interval",
          "select * from eval_results where accuracy < 0 or accuracy > 1 or isnan(accuracy)"),
    Check("eval_results.counts_consistent", "select * from eval_results where correct > n or ties > n or n < 0"),
)

SPEC = TableSpec("eval_results", SCHEMA, ("eval_id", "benchmark", "subset"), 2, CHECKS)

# ---- version 1 (before the history) -----------------------------------------------------------------------
V1_SCHEMA = pa.schema([f for f in SCHEMA if f.name not in (
    "eval_id", "run", "config_key", "protocol", "activation", "code_version")])
LEGACY_SPEC = TableSpec("eval_results", V1_SCHEMA, ("benchmark", "subset", "model_id", "created"), 1)


def legacy_select(files_sql: str) -> str:
    """A DuckDB select over version-1 part files (an SQL list literal) with this schema's columns."""
    return (f"select md5(model_id || '|' || checkpoint_sha256 || '|' || created) as eval_id, model_id as run, "
            f"benchmark, subset, model_id, n, correct, accuracy, ties, missing_images, checkpoint_sha256, config, "
            f"'' as config_key, coalesce(json_extract_string(config, '$.protocol'), '') as protocol, "
            f"coalesce(json_extract_string(config, '$.activation'), '') as activation, 'v1' as code_version, created "
            f"from read_parquet({files_sql})")


def upgrade_v1(table: pa.Table) -> pa.Table:
    """Version-1 rows as version-2 rows (the same mapping as ``legacy_select``)."""
    import hashlib
    import json

    rows = []
    for r in table.to_pylist():
        conf = json.loads(r["config"]) if r["config"] else {}
        key = f"{r['model_id']}|{r['checkpoint_sha256']}|{r['created']}"
        rows.append({**r, "eval_id": hashlib.md5(key.encode()).hexdigest(), "run": r["model_id"], "config_key": "",
                     "protocol": str(conf.get("protocol") or ""), "activation": str(conf.get("activation") or ""),
                     "code_version": "v1"})
    return SPEC.from_rows(rows)
