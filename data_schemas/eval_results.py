"""Table ``eval_results``: one row per benchmark subset × model evaluation."""
import pyarrow as pa

from ._io import Check, TableSpec

SCHEMA = pa.schema([
    pa.field("benchmark", pa.string(), nullable=False),
    pa.field("subset", pa.string(), nullable=False),
    pa.field("model_id", pa.string(), nullable=False),
    pa.field("n", pa.int64(), nullable=False),
    pa.field("correct", pa.int64(), nullable=False),
    pa.field("accuracy", pa.float64()),
    pa.field("ties", pa.int64(), nullable=False),
    pa.field("missing_images", pa.int64(), nullable=False),
    pa.field("checkpoint_sha256", pa.string(), nullable=False),
    pa.field("config", pa.string(), nullable=False),
    pa.field("created", pa.string(), nullable=False),
])

CHECKS = (
    Check("eval_results.accuracy_in_unit_interval",
          "select * from eval_results where accuracy < 0 or accuracy > 1"),
    Check("eval_results.counts_consistent", "select * from eval_results where correct > n or ties > n or n < 0"),
)

SPEC = TableSpec("eval_results", SCHEMA, ("benchmark", "subset", "model_id", "created"), 1, CHECKS)
