"""#30 item 1: MACCO's released training file as a source (`data.source: macco-tsv`), through the captions,
scene_graphs, token_masks, regions and patch_masks tables and their checks, then training; and `macco agreement`
(our parse and grounding against the file's words and boxes).

The fixture is written the way the official loader (``src/training/data_macco.py``) parses the file: tab-separated,
a header, columns by name, ``filepath`` under the datasets folder, ``title``, and Python-literal lists
(``ast.literal_eval``) for the words, the phrases, ``[{phrase: [[x1, y1, x2, y2], ...]}]`` for the boxes (original
pixels) and the negatives."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from data_schemas import TABLES, read_table
from macco.cli import main

COLUMNS = ("filepath", "title", "neg_caption", "neg_image", "object_list", "relation_list", "attribute_list",
           "relation_phrase_list", "attribute_phrase_list", "relation_attribute_phrase_bbox_list")
ROWS = [
    # the reference masks "riding" and "brown"; the phrase boxes are the man+horse union and the horse
    ("coco/train2014/a.jpg", "A man riding a brown horse next to the beach.",
     ["A horse riding a brown man next to the beach."], [1], ["man", "horse", "beach"], ["riding", "next to"],
     ["brown"], ["man riding horse", "horse next to beach"], ["brown horse"],
     [{"man riding horse": [[10, 20, 200, 150]], "brown horse": [[90, 60, 200, 150]],
       "horse next to beach": [[90, 60, 200, 150], [0, 100, 320, 240]]}]),
    # "the" is skipped by the reference; "red" occurs twice: the first one is masked
    ("coco/train2014/b.jpg", "A red cup on the red table.", [], [], ["cup", "table"], ["on", "the"], ["red", "red"],
     ["cup on table"], ["red cup", "red table"], [{"cup on table": [[30, 30, 120, 200]], "red cup": [[30, 30, 90, 90]]}]),
    # a word that does not occur (an inflected form): the reference masks nothing for it; no boxes
    ("coco/train2014/b.jpg", "Two dogs play in the snow.", [], [], ["dogs", "snow"], ["playing"], [], [], [], []),
]


def write_tsv(root: Path, rows=ROWS, broken: str | None = None) -> Path:
    """The file at ``root/official.tsv``, its images under ``root/datasets`` (the reference's layout)."""
    for name, size in (("a.jpg", (320, 240)), ("b.jpg", (160, 240))):
        p = root / "datasets" / "coco" / "train2014" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", size, (120, 80, 40)).save(p)
    lines = ["\t".join(COLUMNS)]
    for r in rows:
        lines.append("\t".join([r[0], r[1], *(repr(v) for v in r[2:])]))
    if broken is not None:
        lines.append(broken)
    (root / "official.tsv").write_text("\n".join(lines) + "\n")
    return root / "official.tsv"


def reference_text_mask(caption: str, words: list[str]) -> set[int]:
    """The official loader's text mask, recomputed independently: each word BPE-encoded alone, its first
    occurrence in the 77 caption tokens marked, "the" skipped."""
    from open_clip.tokenizer import SimpleTokenizer

    tok = SimpleTokenizer()
    tokens = [49406] + tok.encode(caption) + [49407]
    marked: set[int] = set()
    for w in words:
        if w.lower() == "the":
            continue
        ids = tok.encode(w)
        for s in range(len(tokens) - len(ids) + 1):
            if tokens[s:s + len(ids)] == ids:
                marked.update(range(s, s + len(ids)))
                break
    return marked


@pytest.fixture()
def official_tables(tmp_path, capsys):
    tsv = write_tsv(tmp_path)
    t = tmp_path / "T"
    assert main(["captions", str(tsv), "--source", "macco-tsv", "--image-root", str(tmp_path / "datasets"),
                 "--out", str(t)]) == 0
    assert main(["parse", str(t / "captions"), "--out", str(t), "--parser", "official"]) == 0
    assert main(["ground", str(t), "--backend", "official"]) == 0
    assert main(["masks", str(t), "--model", "ViT-B-32", "--model", "macco-micro"]) == 0
    capsys.readouterr()
    return t


def test_the_official_file_becomes_the_tables_and_passes_every_check(official_tables, capsys):
    t = official_tables
    caps = read_table(TABLES["captions"], t / "captions").to_pylist()
    assert [(c["caption_id"], c["width"], c["height"]) for c in caps] == [(0, 320, 240), (1, 160, 240), (2, 160, 240)]
    off = read_table(TABLES["official"], t / "official").to_pylist()
    assert off[0]["relations"] == ["riding", "next to"] and off[0]["neg_captions"] == [ROWS[0][2][0]]
    tm = {r["caption_id"]: r for r in read_table(TABLES["token_masks"], t / "token_masks").to_pylist()}
    for cid, row in enumerate(ROWS):  # the text masks are the reference's, position for position
        want = reference_text_mask(row[1], row[5] + row[6])
        assert set(tm[cid]["relation_idx"]) | set(tm[cid]["attribute_idx"]) == want, (cid, row[1])
    errs = read_table(TABLES["errors"], t / "errors").to_pylist()
    assert {(e["item_id"], e["reason"]) for e in errs} == {
        ("1:relation:the", "official_skipped_word"), ("2:relation:playing", "official_word_not_found")}
    regions = read_table(TABLES["regions"], t / "ground" / "regions").to_pylist()
    by_phrase = {r["phrase"]: [] for r in regions}
    for r in regions:
        by_phrase[r["phrase"]].append(r["box_xyxy"])
    assert by_phrase == {"man riding horse": [[10, 20, 200, 150]], "brown horse": [[90, 60, 200, 150]],
                         "horse next to beach": [[90, 60, 200, 150], [0, 100, 320, 240]],
                         "cup on table": [[30, 30, 120, 200]], "red cup": [[30, 30, 90, 90]]}
    sg = read_table(TABLES["scene_graphs"], t / "scene_graphs").to_pylist()
    riding = next(c for c in sg if c["text"] == "riding")
    names = {c["concept_id"]: c["text"] for c in sg if c["caption_id"] == 0}
    assert (names[riding["subject_id"]], names[riding["object_id"]]) == ("man", "horse")  # from the phrase
    red = [c for c in sg if c["caption_id"] == 1 and c["text"].lower() == "red"]
    assert [c["char_start"] for c in red] == [2, 2]  # the first occurrence, twice: the reference's rule
    assert main(["validate", str(t)]) == 0


def test_training_runs_on_the_official_tables(official_tables, tmp_path):
    from model.train import load_config, train

    t = official_tables
    tables = {"captions": t / "captions", "token_masks": t / "token_masks", "scene_graphs": t / "scene_graphs",
              "regions": t / "ground" / "regions"}
    cfg = load_config(None, [], arch="macco-micro", batch_size=2, max_steps=2, workers=0, warmup=1, log_every=1,
                      progress=False, out_dir=str(tmp_path / "r"), image_root=str(tmp_path / "datasets"),
                      tables={k: str(v) for k, v in tables.items()})
    summary = train(cfg)
    assert summary["steps"] == 2 and summary["history"][-1]["image_reconstruction_loss"] > 0


def test_bad_rows_are_error_rows_naming_line_and_column(tmp_path, capsys):
    tsv = write_tsv(tmp_path, broken="coco/train2014/a.jpg\tA cat.\t[]\t[]\t['cat']\t[]\t[]\t[]\t[]\t[{'x': [[1, 2]]}]")
    assert main(["captions", str(tsv), "--source", "macco-tsv", "--image-root", str(tmp_path / "datasets"),
                 "--out", str(tmp_path / "T")]) == 0
    [e] = read_table(TABLES["errors"], tmp_path / "T" / "errors").to_pylist()
    assert (e["item_id"], e["reason"]) == ("3", "bad_official_row")
    assert "official.tsv: line 5" in e["message"] and "relation_attribute_phrase_bbox_list" in e["message"]


def test_official_parser_needs_the_official_table(tmp_path, capsys):
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": 1, "image_id": 1, "caption": "a dog"}) + "\n")
    assert main(["parse", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "o"), "--parser", "official"]) == 2
    assert "reads the official table of a macco-tsv source" in capsys.readouterr().err


def test_agreement_of_our_parse_with_the_file(official_tables, tmp_path, capsys):
    """Our rules parser on the same captions against the file's words; boxes: ours = the file's (IoU 1) for
    every phrase whose word we found."""
    t = official_tables
    ours = tmp_path / "ours"
    assert main(["parse", str(t / "captions"), "--out", str(ours), "--model", "ViT-B-32"]) == 0
    sg = read_table(TABLES["scene_graphs"], ours / "scene_graphs").to_pylist()
    off_sg = read_table(TABLES["scene_graphs"], t / "scene_graphs").to_pylist()
    off_regions = read_table(TABLES["regions"], t / "ground" / "regions").to_pylist()
    # our regions: the file's boxes moved onto our concept of the same word (so IoU is 1 where matched)
    from data_schemas import write_table

    text_of = {(c["caption_id"], c["concept_id"]): c["text"].lower() for c in off_sg}
    mine = {(c["caption_id"], c["text"].lower()): c["concept_id"] for c in sg if c["kind"] != "object"}
    moved = [{**r, "concept_id": mine[(r["caption_id"], text_of[(r["caption_id"], r["concept_id"])])]}
             for r in off_regions if (r["caption_id"], text_of[(r["caption_id"], r["concept_id"])]) in mine]
    write_table(TABLES["regions"], ours / "regions", TABLES["regions"].from_rows(moved))
    capsys.readouterr()
    assert main(["agreement", str(t), str(ours), "--out", str(tmp_path / "a.json")]) == 0
    a = json.loads((tmp_path / "a.json").read_text())
    ours_rel = sorted(c["text"].lower() for c in sg if c["kind"] == "relation")
    both = sum(w in ours_rel for w in ("riding", "next to", "on")) if ours_rel else 0
    assert a["captions"] == 3 and a["words"]["relation"]["official"] == 4  # riding, next to, on, playing ("the": no)
    assert a["words"]["relation"]["both"] == both and a["words"]["attribute"]["official"] == 3
    assert a["boxes"]["phrases"] == 5 and a["boxes"]["mean_iou"] == 1.0
    assert a["boxes"]["matched"] + a["boxes"]["no_word"] + a["boxes"]["no_box"] == 5
    assert "| masked words | file | ours |" in capsys.readouterr().out
    assert main(["agreement", str(t), str(t)]) == 2  # the file's own graphs are not "ours"


def test_box_iou_is_the_pixel_union_iou():
    from pipeline.agreement import box_iou

    assert box_iou([[0, 0, 10, 10]], [[0, 0, 10, 10]], 20, 20) == 1.0
    assert box_iou([[0, 0, 10, 10]], [[5, 0, 15, 10]], 20, 20) == pytest.approx(50 / 150)
    assert box_iou([[0, 0, 10, 10], [10, 0, 20, 10]], [[0, 0, 20, 10]], 20, 20) == 1.0  # unions, not pairs


def test_flow_config_for_the_official_file(tmp_path):
    """`data.source: macco-tsv` with the official parser and boxes loads; the official parser or boxes on another
    source are a config error."""
    import yaml

    from data_schemas.config import ConfigError
    from flows.config import load_config

    tsv = write_tsv(tmp_path)
    good = {"data": {"source": "macco-tsv", "path": str(tsv), "image_root": str(tmp_path / "datasets")},
            "parse": {"parser": "official"}, "ground": {"backend": "official"}}
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(good))
    assert load_config(tmp_path / "ok.yaml").ground.backend == "official"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"parse": {"parser": "official"}}))
    with pytest.raises(ConfigError, match="parse.parser: 'official' reads MACCO's released file"):
        load_config(tmp_path / "bad.yaml")


# ---- the official loader's masks, row for row (paper fidelity, round 3) -----------------------------------------
LOADER_ROWS = [
    # a BPE piece of an earlier word equals the relation word: "placemat" ends in the piece of "at"
    ("coco/train2014/a.jpg", "A cat sits on a placemat at the table.", [], [], ["cat", "placemat", "table"], ["at"],
     [], ["cat at table"], [], [{"cat at table": [[10, 20, 200, 150]]}]),
    # a multiword relation written with a double space: the tokenizer collapses it
    ("coco/train2014/a.jpg", "A dog next to a bowl.", [], [], ["dog", "bowl"], ["next  to"], [], ["dog next  to bowl"],
     [], [{"dog next  to bowl": [[0, 0, 100, 100], [150, 50, 300, 200]]}]),
    # two phrases sharing one masked word: the loader draws one phrase, never their union
    ("coco/train2014/b.jpg", "A white dog on the white snow.", [], [], ["dog", "snow"], ["on"], ["white", "white"],
     ["dog on snow"], ["white dog", "white snow"],
     [{"white dog": [[10, 10, 60, 60]], "white snow": [[0, 100, 160, 240]], "dog on snow": [[10, 10, 160, 240]]}]),
    # the word is a lemma absent from the caption, the phrase has boxes: the loader can still draw it
    ("coco/train2014/a.jpg", "Cows eat grass in a field.", [], [], ["cows", "grass"], ["graze"], [],
     ["cows graze grass"], [], [{"cows graze grass": [[5, 5, 300, 230]]}]),
    # a box starting 1.7 px left of the image: clamped, the phrase kept
    ("coco/train2014/b.jpg", "A red cup on a table.", [], [], ["cup", "table"], ["on"], ["red"], ["cup on table"],
     ["red cup"], [{"red cup": [[-1.7, 10, 50, 60]], "cup on table": [[-1.7, 10, 150, 230]]}]),
]


def loader_row(row: tuple, size: tuple[int, int]) -> tuple[set[int], list[list[list[float]]]]:
    """What the official loader (``src/training/data_macco.py``) gives a row, recomputed independently from its
    documented rules: the text mask (relation words, then attribute words, "the" skipped, each BPE-encoded alone and
    its first id match in the 77 tokens marked) and the image-mask candidates (one per phrase of the box dict:
    ``random.choice`` over its values), each box clipped to the image (the crop's clipping, before the crop)."""
    w, h = size
    candidates = [[[min(max(b[0], 0), w), min(max(b[1], 0), h), min(max(b[2], 0), w), min(max(b[3], 0), h)]
                   for b in boxes] for boxes in (row[9][0].values() if row[9] else [])]
    return reference_text_mask(row[1], row[5] + row[6]), candidates


def test_the_official_mode_gives_the_loaders_masks_row_for_row(tmp_path, capsys):
    from model.data import build_samples

    tsv = write_tsv(tmp_path, rows=LOADER_ROWS)
    t = tmp_path / "T"
    assert main(["captions", str(tsv), "--source", "macco-tsv", "--image-root", str(tmp_path / "datasets"),
                 "--out", str(t)]) == 0
    assert main(["parse", str(t / "captions"), "--out", str(t), "--parser", "official"]) == 0
    assert main(["ground", str(t), "--backend", "official"]) == 0
    assert main(["masks", str(t), "--model", "ViT-B-32"]) == 0
    caps = {c["caption_id"]: c for c in read_table(TABLES["captions"], t / "captions").to_pylist()}
    tables = {"captions": t / "captions", "token_masks": t / "token_masks", "scene_graphs": t / "scene_graphs",
              "regions": t / "ground" / "regions"}
    samples = {s.caption_id: s for s in build_samples(tables, "train")[0]}
    tm = {r["caption_id"]: r for r in read_table(TABLES["token_masks"], t / "token_masks").to_pylist()}
    for cid, row in enumerate(LOADER_ROWS):
        mask, candidates = loader_row(row, (caps[cid]["width"], caps[cid]["height"]))
        assert set(tm[cid]["relation_idx"]) | set(tm[cid]["attribute_idx"]) == mask, (cid, row[1])
        ours = sorted([[round(v, 3) for v in b] for b in boxes] for boxes in samples[cid].phrase_boxes)
        assert ours == sorted([[round(v, 3) for v in b] for b in boxes] for boxes in candidates), (cid, row[1])
    assert 8 in tm[0]["relation_idx"]  # "at": the last piece of "placemat" (position 8), the loader's first match
    errs = {(e["item_id"], e["reason"]) for e in read_table(TABLES["errors"], t / "errors").to_pylist()}
    assert errs == {("3:relation:graze", "official_word_not_found")}  # the loader masks nothing for it, silently
    capsys.readouterr()
    assert main(["validate", str(t)]) == 0


# two phrases holding no caption word ("graze", "lie": lemmas absent from the caption) — both concept -1 — beside a
# phrase of a masked word, and a phrase with no box; the boxes sit in three corners of a 320 x 240 image
NO_WORD_ROW = ("coco/train2014/a.jpg", "Brown cows eat grass in a field.", [], [], ["cows", "grass", "field"],
               ["graze", "lie in"], ["brown"], ["cows graze grass", "cows lie in field"], ["brown cows"],
               [{"brown cows": [[0, 0, 100, 100]], "cows graze grass": [[220, 140, 320, 240]],
                 "cows lie in field": [[0, 140, 60, 240], [40, 150, 100, 240]], "cows in grass": []}])


def _no_word_tables(tmp_path) -> dict[str, Path]:
    tsv = write_tsv(tmp_path, rows=[NO_WORD_ROW])
    t = tmp_path / "T"
    assert main(["captions", str(tsv), "--source", "macco-tsv", "--image-root", str(tmp_path / "datasets"),
                 "--out", str(t)]) == 0
    assert main(["parse", str(t / "captions"), "--out", str(t), "--parser", "official"]) == 0
    assert main(["ground", str(t), "--backend", "official"]) == 0
    return {"captions": t / "captions", "token_masks": t / "token_masks", "scene_graphs": t / "scene_graphs",
            "regions": t / "ground" / "regions"}


def test_two_phrases_without_a_caption_word_are_two_candidates(tmp_path, capsys):
    """The loader draws one phrase of the dict, whatever its words: two phrases whose words are not in the caption
    (both ``concept_id`` -1 in ``regions``) are two candidates with their own boxes, not one of their union."""
    from model.data import build_samples

    tables = _no_word_tables(tmp_path)
    regions = read_table(TABLES["regions"], tables["regions"]).to_pylist()
    assert sorted({r["phrase"] for r in regions if r["concept_id"] == -1}) == ["cows graze grass", "cows lie in field"]
    [s] = build_samples(tables, "train")[0]
    _, candidates = loader_row(NO_WORD_ROW, (320, 240))
    assert sorted(s.phrase_boxes) == sorted(c for c in candidates if c)  # one per phrase with a box
    assert len(s.phrase_boxes) == 3 and len(s.phrase_kinds) == 3
    [e] = read_table(TABLES["errors"], tables["regions"].parent / "errors").to_pylist()
    assert e["reason"] == "official_phrase_no_box" and "'cows in grass'" in e["message"]  # []: no candidate, said so


def test_the_image_mask_is_one_phrase_drawn_uniformly(tmp_path, capsys):
    """As the loader's ``random.sample(list(phrases.values()), k=1)``: each candidate's boxes alone, each about
    1 / 3 of the draws (the seeds are fixed, so the counts are too)."""
    from data_schemas.geometry import Geometry
    from model.data import DataConfig, MaccoDataset, build_samples

    samples, _ = build_samples(_no_word_tables(tmp_path), "train")
    ds = MaccoDataset(samples, DataConfig(image_root=str(tmp_path / "datasets"), rect_prob=0.0), Geometry(224, 32))
    corners = {(0, 0): "brown cows", (6, 6): "cows graze grass", (6, 0): "cows lie in field"}
    drawn = {name: 0 for name in corners.values()}
    for epoch in range(300):
        grid = ds[(epoch, 0)]["image_mask"].view(7, 7)
        [name] = [name for (r, c), name in corners.items() if grid[r, c]]  # one phrase's boxes, never a union
        drawn[name] += 1
    assert all(70 <= n <= 130 for n in drawn.values()), drawn  # binomial(300, 1/3): mean 100, sd 8.2


def test_a_coco_file_name_gives_its_coco_id_so_the_file_meets_cocos_instances(tmp_path):
    from pipeline.sources import image_id_of

    assert image_id_of("coco/train2014/COCO_train2014_000000123456.jpg") == 123456
    assert image_id_of("val2014/COCO_val2014_000000000042.jpg") == 42
    assert image_id_of("my/photo.jpg") == image_id_of("my/photo.jpg") > 10 ** 6  # a stable hash otherwise
