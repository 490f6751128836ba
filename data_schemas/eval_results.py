"""Table ``eval_results``: the evaluation history, one row per benchmark subset (``level`` subset) and per report
group (``level`` group: the averages the report shows) of one evaluation.

``accuracy`` holds accuracies only (a fraction of cases right, in [0, 1]); what else a benchmark reports beside its
averages is a row of its own whose ``metric`` names what its ``value`` is: ``count`` (ARO's relations / groups kept
and in total), ``setting`` (VG-A's minimum count), ``correlation`` (STS's Pearson / Spearman, in [-1, 1]),
``recall_sum`` (retrieval's R@k summed), so ``avg(accuracy)`` averages accuracies. A group averaged over an
incomplete set of its files (``allow_partial``) has ``partial`` true and the files it lacks in ``missing``. A group
row whose number is an accuracy holds its per-case outcomes in ``cases`` where its benchmark scores case by case
(one character per case it pools, in the benchmark's order: ``1`` right, ``0`` wrong, ``x`` image missing), what a
paired test of two evaluations compares (``macco report --history``).

The table is append-only (``data_schemas.append_table``): every evaluation adds one part, one ``eval_id`` shared
by its rows, and nothing replaces earlier rows. A row names what was evaluated and how, so runs can be told
apart and compared over time: ``run`` (the flow's run name, e.g. ``macco-s0``, or the user's label), the
checkpoint's sha256, ``config_key`` (a hash of every evaluation setting), ``protocol`` / ``activation``, the
evaluation code's version, ``created`` (a UTC timestamp, microseconds) and ``trigger`` (what made it: ``macco eval``,
or the flow run and its deployment, e.g. the nightly ``reevaluate``).

Earlier schema versions are still read: version 1 (before the history: no eval_id, run, config_key, protocol,
activation, code_version), version 2 (``created`` a string, no ``level`` nor ``trigger``), version 3 (every
number in ``accuracy``, counts too; no ``metric``, ``value``, ``partial`` nor ``missing``: its rows get their metric
from the group's name, ``partial`` and ``missing`` null: not recorded) and version 4 (no ``cases``: null, not
recorded; such an evaluation cannot be compared case by case). ``LEGACY`` holds, per version, its spec, the DuckDB
select mapping its rows onto this schema, and the Arrow upgrade an append runs first.
"""
import pyarrow as pa

from ._spec import Check, TableSpec

SCHEMA = pa.schema([
    pa.field("eval_id", pa.string(), nullable=False),  # one per evaluation (a uuid), shared by its rows
    pa.field("run", pa.string(), nullable=False),  # base, clip-ft-s0, macco-s0, or the user's --run label
    pa.field("benchmark", pa.string(), nullable=False),
    pa.field("level", pa.string(), nullable=False),  # subset (a file / subset of the benchmark) | group (its average)
    pa.field("subset", pa.string(), nullable=False),  # the subset's name, or the group's (level group)
    pa.field("model_id", pa.string(), nullable=False),  # the architecture / local-dir model evaluated
    pa.field("n", pa.int64(), nullable=False),  # cases scored (a group: the cases it pools, where known)
    pa.field("correct", pa.int64(), nullable=False),
    pa.field("metric", pa.string(), nullable=False),  # what the row's number is: METRICS
    pa.field("accuracy", pa.float64()),  # metric accuracy only: in [0, 1] (null: the subset reports none)
    pa.field("value", pa.float64()),  # the number of a row whose metric is not accuracy
    pa.field("partial", pa.bool_()),  # a group averaged over an incomplete set of its files (null: not recorded)
    pa.field("missing", pa.list_(pa.string())),  # the files a partial group lacks (null: not recorded)
    pa.field("cases", pa.string()),  # a group's per-case outcomes, 1/0/x (null: none, or not recorded before v5)
    pa.field("ties", pa.int64(), nullable=False),
    pa.field("missing_images", pa.int64(), nullable=False),
    pa.field("checkpoint_sha256", pa.string(), nullable=False),
    pa.field("config", pa.string(), nullable=False),  # every evaluation setting, JSON
    pa.field("config_key", pa.string(), nullable=False),  # sha256 (16 hex) of ``config``
    pa.field("protocol", pa.string(), nullable=False),
    pa.field("activation", pa.string(), nullable=False),
    pa.field("code_version", pa.string(), nullable=False),  # the evaluation code's version
    pa.field("created", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("trigger", pa.string(), nullable=False),  # macco eval | flow run <name> [deployment <name>]
])

# what a group row's number is, other than an accuracy, by the group's name (``metric_of``)
METRICS = ("accuracy", "count", "setting", "correlation", "recall_sum")
NOT_ACCURACY = {"relations_kept": "count", "relations_total": "count", "groups_kept": "count", "groups_total": "count",
                "min_count": "setting", "rsum": "recall_sum"}
CORRELATION_SUFFIXES = ("_pearson", "_spearman")  # STS: sick-r_spearman, sts-b_cosine_pearson, ...


def metric_of(level: str, name: str) -> str:
    """The ``metric`` of a row of ``level`` named ``name``: subsets are accuracies; a group is one unless its name
    is a count, a setting or another measure a benchmark reports beside its averages."""
    if level != "group":
        return "accuracy"
    if name in NOT_ACCURACY:
        return NOT_ACCURACY[name]
    return "correlation" if name.endswith(CORRELATION_SUFFIXES) else "accuracy"


def _metric_sql() -> str:
    """``metric_of`` over a version-3 row's ``level`` and ``subset`` columns, as SQL."""
    names = {m: ", ".join(f"'{n}'" for n, k in NOT_ACCURACY.items() if k == m) for m in set(NOT_ACCURACY.values())}
    suffix = " or ".join(f"suffix(subset, '{s}')" for s in CORRELATION_SUFFIXES)
    return ("case when level <> 'group' then 'accuracy' " +
            "".join(f"when subset in ({v}) then '{m}' " for m, v in sorted(names.items())) +
            f"when {suffix} then 'correlation' else 'accuracy' end")


CHECKS = (
    Check("eval_results.key_unique",
          "select eval_id, benchmark, level, subset, count(*) as n from eval_results group by all having n > 1"),
    Check("eval_results.accuracy_in_unit_interval",
          "select * from eval_results where accuracy < 0 or accuracy > 1 or isnan(accuracy)"),
    Check("eval_results.counts_consistent", "select * from eval_results where correct > n or ties > n or n < 0"),
    Check("eval_results.level_valid", "select * from eval_results where level not in ('subset', 'group')"),
    Check("eval_results.metric_valid", "select * from eval_results where metric not in (" +
          ", ".join(f"'{m}'" for m in METRICS) + ")"),
    Check("eval_results.one_number_column",  # an accuracy row has no value, another row no accuracy
          "select * from eval_results where (metric = 'accuracy' and value is not null) or "
          "(metric <> 'accuracy' and accuracy is not null)"),
    Check("eval_results.value_in_range",
          "select * from eval_results where isnan(value) or (metric = 'correlation' and abs(value) > 1) or "
          "(metric in ('count', 'setting', 'recall_sum') and value < 0)"),
    Check("eval_results.partial_names_missing", "select * from eval_results where partial is not null and "
          "(partial <> (coalesce(len(missing), 0) > 0))"),
    Check("eval_results.cases_match_counts",  # a group's outcomes: 1/0/x, n the cases scored, missing_images the x
          "select * from eval_results where cases is not null and (level <> 'group' or metric <> 'accuracy' or "
          "not regexp_full_match(cases, '[01x]*') or missing_images <> length(cases) - "
          "length(replace(cases, 'x', '')) or n <> length(replace(cases, 'x', '')))"),
)

SPEC = TableSpec("eval_results", SCHEMA, ("eval_id", "benchmark", "level", "subset"), 5, CHECKS)

# ---- earlier versions --------------------------------------------------------------------------------------------
V4_SCHEMA = pa.schema([f for f in SCHEMA if f.name != "cases"])
V4_SPEC = TableSpec("eval_results", V4_SCHEMA, SPEC.key, 4)
_V4_ADDED = ("metric", "value", "partial", "missing")
V3_SCHEMA = pa.schema([f for f in V4_SCHEMA if f.name not in _V4_ADDED])
V3_SPEC = TableSpec("eval_results", V3_SCHEMA, SPEC.key, 3)
_V2_DROPPED = ("level", "trigger")
V2_SCHEMA = pa.schema([f if f.name != "created" else pa.field("created", pa.string(), nullable=False)
                       for f in V3_SCHEMA if f.name not in _V2_DROPPED])
V2_SPEC = TableSpec("eval_results", V2_SCHEMA, ("eval_id", "benchmark", "subset"), 2)
V1_SCHEMA = pa.schema([f for f in V2_SCHEMA if f.name not in (
    "eval_id", "run", "config_key", "protocol", "activation", "code_version")])
LEGACY_SPEC = TableSpec("eval_results", V1_SCHEMA, ("benchmark", "subset", "model_id", "created"), 1)

_CREATED = "cast(created as timestamptz) as created"  # the string '2026-12-03T04:05:06.123456Z' as a timestamp
_NO_CASES = "null::varchar as cases"  # before version 5: not recorded
_UNRECORDED = f"null::boolean as partial, null::varchar[] as missing, {_NO_CASES}"  # before version 4
_V4_COLUMNS = f"'accuracy' as metric, null::double as value, {_UNRECORDED}"  # versions 1, 2: subset rows only


def select_v4(files_sql: str) -> str:
    """A DuckDB select over version-4 part files (an SQL list literal) with this schema's columns: no ``cases``."""
    return f"select *, {_NO_CASES} from read_parquet({files_sql})"


def select_v3(files_sql: str) -> str:
    """A DuckDB select over version-3 part files (an SQL list literal) with this schema's columns: a group row
    whose name is not an accuracy's (``metric_of``) has its number moved from ``accuracy`` to ``value``."""
    return (f"select * exclude (accuracy), case when metric = 'accuracy' then accuracy end as accuracy, "
            f"case when metric <> 'accuracy' then accuracy end as value, {_UNRECORDED} "
            f"from (select *, {_metric_sql()} as metric from read_parquet({files_sql}))")


def select_v2(files_sql: str) -> str:
    """A DuckDB select over version-2 part files (an SQL list literal) with this schema's columns."""
    return (f"select eval_id, run, benchmark, 'subset' as level, subset, model_id, n, correct, accuracy, ties, "
            f"missing_images, checkpoint_sha256, config, config_key, protocol, activation, code_version, {_CREATED}, "
            f"'' as trigger, {_V4_COLUMNS} from read_parquet({files_sql})")


def legacy_select(files_sql: str) -> str:
    """A DuckDB select over version-1 part files (an SQL list literal) with this schema's columns."""
    return (f"select md5(model_id || '|' || checkpoint_sha256 || '|' || created) as eval_id, model_id as run, "
            f"benchmark, 'subset' as level, subset, model_id, n, correct, accuracy, ties, missing_images, "
            f"checkpoint_sha256, config, '' as config_key, coalesce(json_extract_string(config, '$.protocol'), '') "
            f"as protocol, coalesce(json_extract_string(config, '$.activation'), '') as activation, 'v1' as "
            f"code_version, {_CREATED}, '' as trigger, {_V4_COLUMNS} from read_parquet({files_sql})")


def parse_created(text: str):
    """A version-1/2 ``created`` string as the timestamp this schema stores."""
    from datetime import datetime, timezone

    for fmt in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    return datetime.fromisoformat(text)


def _v4(r: dict) -> dict:
    """A version-3 row (or an earlier one mapped onto version 3) as a row of this schema (``select_v3``)."""
    metric = metric_of(r["level"], r["subset"])
    number = r["accuracy"]
    return {**r, "metric": metric, "accuracy": number if metric == "accuracy" else None,
            "value": None if metric == "accuracy" else number, "partial": None, "missing": None, "cases": None}


def upgrade_v4(table: pa.Table) -> pa.Table:
    """Version-4 rows as rows of this schema (the same mapping as ``select_v4``: ``cases`` null, not recorded)."""
    return SPEC.from_rows([{**r, "cases": None} for r in table.to_pylist()])


def upgrade_v3(table: pa.Table) -> pa.Table:
    """Version-3 rows as rows of this schema (the same mapping as ``select_v3``)."""
    return SPEC.from_rows([_v4(r) for r in table.to_pylist()])


def upgrade_v2(table: pa.Table) -> pa.Table:
    """Version-2 rows as rows of this schema (the same mapping as ``select_v2``)."""
    return SPEC.from_rows([_v4({**r, "level": "subset", "trigger": "", "created": parse_created(r["created"])})
                           for r in table.to_pylist()])


def upgrade_v1(table: pa.Table) -> pa.Table:
    """Version-1 rows as rows of this schema (the same mapping as ``legacy_select``)."""
    import hashlib
    import json

    rows = []
    for r in table.to_pylist():
        conf = json.loads(r["config"]) if r["config"] else {}
        key = f"{r['model_id']}|{r['checkpoint_sha256']}|{r['created']}"
        rows.append(_v4({**r, "eval_id": hashlib.md5(key.encode()).hexdigest(), "run": r["model_id"], "config_key": "",
                     "protocol": str(conf.get("protocol") or ""), "activation": str(conf.get("activation") or ""),
                     "code_version": "v1", "level": "subset", "trigger": "", "created": parse_created(r["created"])}))
    return SPEC.from_rows(rows)


# version -> (its spec, the select reading its parts as this schema's rows, the upgrade of its rows)
LEGACY = {1: (LEGACY_SPEC, legacy_select, upgrade_v1), 2: (V2_SPEC, select_v2, upgrade_v2),
          3: (V3_SPEC, select_v3, upgrade_v3), 4: (V4_SPEC, select_v4, upgrade_v4)}
