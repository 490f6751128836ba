"""Table ``negative_captions``: hard-negative captions given by a training file, read as given (NegCLIP's
``neg_caption`` list, ``pipeline.negclip_tsv``); mode ``negclip`` trains on them instead of making its own from the
scene graphs (``model.hardneg_data``). An empty list is a caption the file gives no negative for."""
import pyarrow as pa

from ._spec import Check, TableSpec

SCHEMA = pa.schema([
    pa.field("caption_id", pa.int64(), nullable=False),  # the data row's index (0-based), as the captions table
    pa.field("negatives", pa.list_(pa.string()), nullable=False),  # neg_caption, in the file's order
])

CHECKS = (
    Check("negative_captions.key_unique",
          "select caption_id, count(*) as n from negative_captions group by all having n > 1"),
    Check("negative_captions.caption_exists",
          "select o.* from negative_captions o anti join captions c using (caption_id)", needs=("captions",)),
)

SPEC = TableSpec("negative_captions", SCHEMA, ("caption_id",), 1, CHECKS)
