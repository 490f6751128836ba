"""Table ``token_masks``: per caption × tokenizer, the CLIP token ids and the positions of each concept kind.

Positions index the ``context_length`` token sequence (CLIP BPE: SOT at 0; a Hugging Face tokenizer ``hf:<name>``:
the first word at 0). ``eot_idx`` is the end-of-text position.
"""
import pyarrow as pa

from ._spec import Check, TableSpec

SCHEMA = pa.schema([
    pa.field("caption_id", pa.int64(), nullable=False),
    pa.field("tokenizer", pa.string(), nullable=False),
    pa.field("token_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("eot_idx", pa.int32(), nullable=False),
    pa.field("relation_idx", pa.list_(pa.int32()), nullable=False),
    pa.field("attribute_idx", pa.list_(pa.int32()), nullable=False),
    pa.field("object_idx", pa.list_(pa.int32()), nullable=False),
    pa.field("unmatched", pa.list_(pa.string()), nullable=False),
    pa.field("truncated", pa.bool_(), nullable=False),
])

_POS = "list_concat(relation_idx, attribute_idx, object_idx)"
_FIRST = "(case when tokenizer = 'clip-bpe' then 1 else 0 end)"  # the first caption position

CHECKS = (
    Check("token_masks.key_unique",
          "select caption_id, tokenizer, count(*) as n from token_masks group by all having n > 1"),
    Check("token_masks.key_not_null", "select * from token_masks where caption_id is null or tokenizer is null"),
    Check("token_masks.caption_exists",
          "select t.* from token_masks t anti join captions c using (caption_id)", needs=("captions",)),
    # CLIP BPE: SOT at 0, EOT = {eot_token_id} at eot_idx; Hugging Face tokenizers (hf:<name>, SigLIP's
    # SentencePiece): no start token, their own end token at eot_idx
    Check("token_masks.eot_consistent",
          f"select * from token_masks where eot_idx < {_FIRST} or eot_idx >= len(token_ids) "
          "or (tokenizer = 'clip-bpe' and token_ids[eot_idx + 1] <> {eot_token_id})"),
    Check("token_masks.positions_in_caption",
          f"select * from token_masks where len({_POS}) > 0 and "
          f"(list_min({_POS}) < {_FIRST} or list_max({_POS}) >= eot_idx)"),
    Check("token_masks.coverage",
          "select share from (select avg(case when len(relation_idx) + len(attribute_idx) > 0 "
          "then 1.0 else 0.0 end) as share from token_masks) where share < {min_text_mask_coverage}",
          key=("share",)),
)

SPEC = TableSpec("token_masks", SCHEMA, ("caption_id", "tokenizer"), 1, CHECKS)
