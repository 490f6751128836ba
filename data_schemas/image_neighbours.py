"""Table ``image_neighbours``: each training image's hard-negative images, NegCLIP's ``neg_image``: its k nearest
neighbours by the base model's image embedding (``model.neighbours.nearest_neighbours``, cosine, the image itself
left out), or the neighbours NegCLIP's training file gives (``pipeline.negclip_tsv``: row indices, read as given).
The modes ``negclip`` / ``macco+negclip`` with ``neg_images: true`` put one of an image's neighbours, with a caption
of it, in the image's batch (``model.neighbour_batches``)."""
import pyarrow as pa

from ._spec import Check, TableSpec

SCHEMA = pa.schema([
    pa.field("image_id", pa.int64(), nullable=False),  # the anchor image (captions.image_id)
    # NegCLIP's file: the anchor row's caption (its file gives neighbours per row); null: every caption of image_id
    pa.field("caption_id", pa.int64(), nullable=True),
    pa.field("rank", pa.int32(), nullable=False),  # 0: the nearest (by the file: its list's order)
    pa.field("neighbour_image_id", pa.int64(), nullable=False),
    # NegCLIP's file: the caption of the row its index names (the neighbour's caption as given); null: a caption of
    # the neighbour image drawn each time it joins a batch
    pa.field("neighbour_caption_id", pa.int64(), nullable=True),
    pa.field("similarity", pa.float32(), nullable=True),  # cosine of the base model's image embeddings; null: given
])

CHECKS = (
    Check("image_neighbours.key_unique",
          "select image_id, caption_id, rank, count(*) as n from image_neighbours group by all having n > 1"),
    Check("image_neighbours.not_itself", "select * from image_neighbours where neighbour_image_id = image_id"),
    Check("image_neighbours.image_exists",
          "select n.* from image_neighbours n anti join captions c on n.image_id = c.image_id", needs=("captions",)),
    Check("image_neighbours.neighbour_exists",
          "select n.* from image_neighbours n anti join captions c on n.neighbour_image_id = c.image_id",
          needs=("captions",)),
)

SPEC = TableSpec("image_neighbours", SCHEMA, ("image_id", "caption_id", "rank"), 1, CHECKS)
