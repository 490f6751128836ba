"""Table ``official``: the per-caption annotations of MACCO's released training file
(``mscoco_object_relation_attribute_with_phrase_bbox.tsv``, read by ``pipeline.macco_tsv``), kept as the file
gives them, so the parse stage (``parser: official``) and the ground stage (``backend: official``) can build the
``scene_graphs``, ``token_masks`` and ``regions`` tables from exactly the paper's masked words and phrase boxes,
and ``macco agreement`` can compare them with ours."""
import pyarrow as pa

from ._spec import Check, TableSpec

_WORDS = pa.list_(pa.string())

SCHEMA = pa.schema([
    pa.field("caption_id", pa.int64(), nullable=False),  # the data row's index (0-based), as the captions table
    pa.field("objects", _WORDS, nullable=False),  # object_list
    pa.field("relations", _WORDS, nullable=False),  # relation_list (masked in the text)
    pa.field("attributes", _WORDS, nullable=False),  # attribute_list (masked in the text)
    pa.field("relation_phrases", _WORDS, nullable=False),  # relation_phrase_list
    pa.field("attribute_phrases", _WORDS, nullable=False),  # attribute_phrase_list
    pa.field("phrase_boxes", pa.string(), nullable=False),  # JSON {phrase: [[x1, y1, x2, y2], ...]}, image pixels
    pa.field("neg_captions", _WORDS, nullable=False),  # neg_caption (NegCLIP-style hard negatives)
])

CHECKS = (
    Check("official.key_unique", "select caption_id, count(*) as n from official group by all having n > 1"),
    Check("official.caption_exists", "select o.* from official o anti join captions c using (caption_id)",
          needs=("captions",)),
)

SPEC = TableSpec("official", SCHEMA, ("caption_id",), 1, CHECKS)
