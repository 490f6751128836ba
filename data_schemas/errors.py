"""Table ``errors``: one row per rejected item (bad caption, unreadable image, phrase with no box...)."""
import pyarrow as pa

from ._spec import Check, TableSpec

SCHEMA = pa.schema([
    pa.field("stage", pa.string(), nullable=False),
    pa.field("item_id", pa.string(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("message", pa.string(), nullable=False),
])

CHECKS = (
    Check("errors.key_unique",
          "select stage, item_id, reason, count(*) as n from errors group by all having n > 1"),
)

SPEC = TableSpec("errors", SCHEMA, ("stage", "item_id", "reason"), 1, CHECKS)


def error_row(stage: str, item_id, reason: str, message: str) -> dict:
    return {"stage": stage, "item_id": str(item_id), "reason": reason, "message": message}
