"""pipeline/show.py: ``macco show-masks`` (an unknown caption id in one line; each phrase coloured as its tokens)."""
from __future__ import annotations

from PIL import Image

from data_schemas import TABLES, read_table
from macco.cli import main
from tests_support import one_line_error
from tests_support import world_tables_copy as tables  # noqa: F401 (fixtures)


def test_show_masks_with_an_unknown_caption_id_is_one_line(world, tables, tmp_path, capsys):
    assert main(["show-masks", str(tables), "--images", str(world), "--caption-id", "987654",
                 "--model", "macco-micro", "--out", str(tmp_path / "m.png")]) == 2
    err = one_line_error(capsys, "show-masks")
    assert "caption id 987654 is not in the captions table" in err and "ids " in err


def test_show_masks_colours_each_phrase_as_its_tokens(world, tables, tmp_path):
    from pipeline.show import PHRASE_COLOURS

    sg = read_table(TABLES["scene_graphs"], tables / "scene_graphs").to_pylist()
    cid = next(r["caption_id"] for r in sg if r["kind"] == "relation")
    phrases = [r for r in sg if r["caption_id"] == cid and r["kind"] != "object"]
    assert main(["show-masks", str(tables), "--images", str(world), "--caption-id", str(cid),
                 "--model", "macco-micro", "--out", str(tmp_path / "m.png")]) == 0
    with Image.open(tmp_path / "m.png") as im:
        rgb = im.convert("RGB")
        half = rgb.width - 520  # the picture | the text
        pic = set(rgb.crop((0, 0, half, rgb.height)).getdata())
        text = set(rgb.crop((half, 0, rgb.width, rgb.height)).getdata())
    for colour in PHRASE_COLOURS[:len(phrases)]:  # each phrase's colour outlines its box and boxes its tokens
        assert colour in pic and colour in text, colour
