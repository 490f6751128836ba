"""#46 item 1: NegCLIP's training file as a source (`data.source: negclip-tsv`, ``pipeline/negclip_tsv.py``): the
captions, their negatives (table negative_captions) and the neighbour rows (table image_neighbours) read as given,
bad lines and bad indices error rows naming file and line, the tables passing their checks, and mode negclip
training on the file's own negatives and neighbour images.

The fixture is written in their file's format (``temp_data/valid_neg_clip.tsv``): tab-separated, a header whose
first column is pandas' unnamed index, ``title``, ``filepath``, ``neg_caption`` (a Python list of captions, CSV-quoted
where a caption holds a quote) and ``neg_image`` (a Python list of the file's 0-based row indices)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from data_schemas import TABLES, read_table
from macco.cli import main

ROWS = [  # (image, title, neg_caption, neg_image)
    ("a", "A man riding a brown horse.", ["A horse riding a brown man ."], [1, 2]),
    ("b", "A red cup on a wooden table.", ["A red table on a wooden cup .", "A wooden cup on a red table ."], [0, 3]),
    ("c", "A small dog next to a black cat.", [], [1]),  # no negative given
    ("d", "A cat sitting under a chair.", ["A chair sitting under a cat ."], [99, 3, 0]),  # 99: no row; 3: itself
    ("e", "A white truck filled with motorcycle on it's flatbed.", ["A white motorcycle filled with truck on it 's "
                                                                   "flatbed ."], [0, 1]),
    ("f", "A green bus parked near a tall tree.", ["A tall bus parked near a green tree ."], [4, 0]),
]


def _cell(value) -> str:
    s = repr(value)
    return '"' + s.replace('"', '""') + '"' if '"' in s else s  # pandas' CSV quoting, as their file has it


def write_tsv(root: Path, broken: str | None = None) -> Path:
    lines = ["\ttitle\tfilepath\tneg_caption\tneg_image"]
    for i, (img, title, negs, near) in enumerate(ROWS):
        p = root / "datasets" / "coco" / "train2014" / f"{img}.jpg"
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (64, 48), (40 * i, 80, 200 - 30 * i)).save(p)
        lines.append("\t".join([str(i), title, f"coco/train2014/{img}.jpg", _cell(negs), _cell(near)]))
    if broken is not None:
        lines.append(broken)
    (root / "negclip.tsv").write_text("\n".join(lines) + "\n")
    return root / "negclip.tsv"


def test_the_reader_keeps_captions_negatives_and_neighbours_as_given(tmp_path):
    from pipeline.negclip_tsv import read_negclip_tsv

    ROWS_E = ROWS[4][2][0]
    assert "it 's" in ROWS_E and _cell(ROWS[4][2]).startswith('"[')  # a quote in a caption: the cell is CSV-quoted
    read = read_negclip_tsv(write_tsv(tmp_path), tmp_path / "datasets")
    assert [(r["caption_id"], r["caption"]) for r in read.rows] == [(i, r[1]) for i, r in enumerate(ROWS)]
    negs = {r["caption_id"]: r["negatives"] for r in read.tables["negative_captions"]}
    assert negs == {i: r[2] for i, r in enumerate(ROWS)}
    image = {r["caption_id"]: r["image_id"] for r in read.rows}
    near = [(r["caption_id"], r["rank"], r["neighbour_caption_id"]) for r in read.tables["image_neighbours"]]
    assert near == [(0, 0, 1), (0, 1, 2), (1, 0, 0), (1, 1, 3), (2, 0, 1), (3, 0, 0), (4, 0, 0), (4, 1, 1),
                    (5, 0, 4), (5, 1, 0)]
    assert all(r["image_id"] == image[r["caption_id"]] and r["neighbour_image_id"] == image[r["neighbour_caption_id"]]
               for r in read.tables["image_neighbours"])
    errs = {e["item_id"]: e for e in read.errors}
    assert set(errs) == {"3:neg_image:99", "3:neg_image:3"}
    assert "negclip.tsv: line 5: neg_image 99: no caption row" in errs["3:neg_image:99"]["message"]
    assert "neg_image 3: the row's own image" in errs["3:neg_image:3"]["message"]


@pytest.mark.parametrize("broken, column", [
    ("6\tA cat.\tcoco/train2014/a.jpg\t['unclosed\t[0]", "neg_caption"),
    ("6\tA cat.\tcoco/train2014/a.jpg\t[]\t[0, 'x']", "neg_image"),
    ("6\tA cat.\tcoco/train2014/a.jpg\t[]\t", "neg_image"),
])
def test_a_bad_line_is_an_error_row_naming_file_line_and_column(broken, column, tmp_path):
    from pipeline.negclip_tsv import read_negclip_tsv

    read = read_negclip_tsv(write_tsv(tmp_path, broken=broken), tmp_path / "datasets")
    [e] = [e for e in read.errors if e["reason"] == "bad_negclip_row"]
    assert e["item_id"] == "6" and "negclip.tsv: line 8" in e["message"] and column in e["message"]
    assert len(read.rows) == len(ROWS) and 6 not in {r["caption_id"] for r in read.tables["negative_captions"]}


@pytest.fixture()
def negclip_tables(tmp_path, capsys):
    tsv = write_tsv(tmp_path)
    t = tmp_path / "T"
    assert main(["captions", str(tsv), "--source", "negclip-tsv", "--image-root", str(tmp_path / "datasets"),
                 "--out", str(t)]) == 0
    assert main(["parse", str(t / "captions"), "--out", str(t)]) == 0
    capsys.readouterr()
    return t


def test_the_file_becomes_checked_tables_and_trains_mode_negclip(negclip_tables, tmp_path, capsys):
    from data_schemas.checks import run_checks
    from model.train import load_config, train

    t = negclip_tables
    names = ("captions", "token_masks", "negative_captions", "image_neighbours")
    results = run_checks({n: t / n for n in ("captions", "negative_captions", "image_neighbours")})
    assert results and all(r.status == "pass" for r in results), [(r.check, r.status) for r in results]
    assert main(["validate", str(t)]) == 0  # the verb finds and checks them too (the flow's gate reads them)
    checked = capsys.readouterr().out
    assert "image_neighbours.not_itself" in checked and "negative_captions.caption_exists" in checked
    cfg = load_config(None, [], arch="macco-micro", mode="negclip", neg_images=True, batch_size=4, max_steps=3,
                      workers=0, warmup=1, log_every=1, progress=False, out_dir=str(tmp_path / "r"),
                      image_root=str(tmp_path / "datasets"), tables={n: str(t / n) for n in names})
    notes = []
    s = train(cfg, on_note=notes.append)
    assert s["steps"] == 3 and all(0 < h["hard_negatives"] <= 4 for h in s["history"])
    samples = json.loads((tmp_path / "r" / "summary.json").read_text())["samples"]
    hard, near = samples["hard_negatives"], samples["neighbour_images"]
    trained = samples["captions"] - samples["no_token_mask"]
    assert hard["source"] == "negative_captions" and hard["captions"] == trained
    assert hard["without_negatives_by_reason"] == {"empty_list": 1}  # row 2: the file gives none
    assert hard["made"] == {"given": sum(len(r[2]) for r in ROWS)} and hard["blank_dropped"] == 0
    assert near == {"anchors": trained, "with_neighbour": trained, "without_neighbour": 0}
    assert any(f"{hard['with_negatives']} of {trained} captions have a hard negative" in n for n in notes)


def test_given_negatives_train_negclip_only(negclip_tables, tmp_path):
    from data_schemas.config import ConfigError
    from model.train import check_tables, load_config

    t = negclip_tables
    cfg = load_config(None, [], mode="ce-clip", tables={n: str(t / n) for n in ("captions", "token_masks",
                                                                                "negative_captions")})
    with pytest.raises(ConfigError, match="negative_captions .* train modes negclip and macco\\+negclip"):
        check_tables(cfg)
