"""Table ``captions``: one row per caption (COCO 2014 / Karpathy / synthetic world)."""
import pyarrow as pa

from ._spec import Check, TableSpec

SCHEMA = pa.schema([
    pa.field("caption_id", pa.int64(), nullable=False),
    pa.field("image_id", pa.int64(), nullable=False),
    pa.field("file_name", pa.string(), nullable=False),
    pa.field("width", pa.int32(), nullable=False),
    pa.field("height", pa.int32(), nullable=False),
    pa.field("caption", pa.string(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
])

CHECKS = (
    Check("captions.key_unique", "select caption_id, count(*) as n from captions group by caption_id having n > 1"),
    Check("captions.key_not_null", "select * from captions where caption_id is null or image_id is null"),
    Check("captions.image_size_positive", "select * from captions where width <= 0 or height <= 0"),
    Check("captions.caption_not_empty", "select * from captions where caption is null or trim(caption) = ''"),
)

SPEC = TableSpec("captions", SCHEMA, ("caption_id",), 1, CHECKS)
