"""Table ``regions``: one row per grounded box of a phrase (attribute or relation concept).

``box_xyxy`` is in original-image pixels, x2/y2 exclusive.
"""
import pyarrow as pa

from ._spec import Check, TableSpec

SCHEMA = pa.schema([
    pa.field("caption_id", pa.int64(), nullable=False),
    pa.field("concept_id", pa.int32(), nullable=False),
    pa.field("box_id", pa.int32(), nullable=False),
    pa.field("image_id", pa.int64(), nullable=False),
    pa.field("phrase", pa.string(), nullable=False),
    pa.field("box_xyxy", pa.list_(pa.float32(), 4), nullable=False),
    pa.field("score", pa.float32(), nullable=False),
    pa.field("label", pa.string(), nullable=False),
    pa.field("backend", pa.string(), nullable=False),
])

_FINITE = " and ".join(f"isfinite(r.box_xyxy[{i}])" for i in range(1, 5))

CHECKS = (
    Check("regions.key_unique",
          "select caption_id, concept_id, box_id, count(*) as n from regions group by all having n > 1"),
    Check("regions.key_not_null",
          "select * from regions where caption_id is null or concept_id is null or box_id is null"),
    # concept -1: a phrase of MACCO's file holding none of its caption's masked words (the official loader still
    # draws it; pipeline/grounding/official.py)
    Check("regions.concept_exists",
          "select r.* from regions r anti join scene_graphs s using (caption_id, concept_id) "
          "where not (r.concept_id = -1 and r.backend = 'official')",
          needs=("scene_graphs",)),
    Check("regions.box_inside_image",  # finite boxes (regions.box_finite reports the others)
          f"select r.* from regions r join captions c using (caption_id) where {_FINITE} and ("
          "r.box_xyxy[1] < 0 or r.box_xyxy[2] < 0 or r.box_xyxy[3] > c.width or r.box_xyxy[4] > c.height "
          "or r.box_xyxy[1] >= r.box_xyxy[3] or r.box_xyxy[2] >= r.box_xyxy[4])",
          needs=("captions",)),
    Check("regions.box_finite", f"select * from regions r where not ({_FINITE})"),
    Check("regions.score_in_unit_interval", "select * from regions where score < 0 or score > 1 or isnan(score)"),
    Check("regions.coverage",
          "select share from (select avg(case when r.caption_id is null then 0.0 else 1.0 end) as share "
          "from scene_graphs s left join (select distinct caption_id, concept_id from regions) r "
          "using (caption_id, concept_id) where s.kind in ('attribute', 'relation')) "
          "where share < {min_grounded_coverage}",
          needs=("scene_graphs",), key=("share",)),
)

SPEC = TableSpec("regions", SCHEMA, ("caption_id", "concept_id", "box_id"), 1, CHECKS)
