"""flows/records_data.py: the data stages' input checks, as the verbs run them."""
from __future__ import annotations

from PIL import Image

from macco.cli import main
from tests_support import one_line_error


def test_annotations_backend_on_captions_that_are_not_coco_refuses(world, tmp_path, capsys):
    """Today: exit 0, 0 regions, every phrase a no_box row."""
    Image.new("RGB", (40, 30)).save(tmp_path / "a.png")
    (tmp_path / "d.tsv").write_text("filepath\ttitle\na.png\ta red circle left of a blue square\n")
    assert main(["captions", str(tmp_path / "d.tsv"), "--source", "csv", "--out", str(tmp_path / "T")]) == 0
    assert main(["parse", str(tmp_path / "T" / "captions"), "--out", str(tmp_path / "T"),
                 "--model", "macco-micro"]) == 0
    capsys.readouterr()
    assert main(["ground", str(tmp_path / "T"), "--images", str(tmp_path), "--instances", str(world)]) == 2
    assert "annotations backend reads COCO instance boxes" in one_line_error(capsys, "ground")
    assert not (tmp_path / "T" / "ground").exists()
