"""Table ``patch_masks``: per phrase × patch grid, the masked patches under the evaluation preprocessing.

``patch_idx`` is row-major over the ``grid × grid`` patches, without a CLS offset.
"""
import pyarrow as pa

from ._spec import Check, TableSpec

SCHEMA = pa.schema([
    pa.field("caption_id", pa.int64(), nullable=False),
    pa.field("concept_id", pa.int32(), nullable=False),
    pa.field("grid", pa.int32(), nullable=False),
    pa.field("image_id", pa.int64(), nullable=False),
    pa.field("patch_idx", pa.list_(pa.int32()), nullable=False),
    pa.field("image_size", pa.int32(), nullable=False),
    pa.field("patch_size", pa.int32(), nullable=False),
    pa.field("preprocess", pa.string(), nullable=False),
])

CHECKS = (
    Check("patch_masks.key_unique",
          "select caption_id, concept_id, grid, count(*) as n from patch_masks group by all having n > 1"),
    Check("patch_masks.key_not_null",
          "select * from patch_masks where caption_id is null or concept_id is null or grid is null"),
    Check("patch_masks.grid_consistent",
          "select * from patch_masks where patch_size <= 0 or grid <> image_size // patch_size "
          "or image_size % patch_size <> 0"),
    Check("patch_masks.patch_in_grid",
          "select * from patch_masks where len(patch_idx) > 0 and "
          "(list_min(patch_idx) < 0 or list_max(patch_idx) >= grid * grid)"),
    Check("patch_masks.region_exists",
          "select p.* from patch_masks p anti join (select distinct caption_id, concept_id from regions) r "
          "using (caption_id, concept_id)", needs=("regions",)),
)

SPEC = TableSpec("patch_masks", SCHEMA, ("caption_id", "concept_id", "grid"), 1, CHECKS)
