"""macco/commands_data.py: the data verbs' own messages."""
from __future__ import annotations

from data_schemas import TABLES, read_table
from macco.cli import main


def test_csv_whose_images_are_all_missing_says_so(tmp_path, capsys):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.tsv").write_text("filepath\ttitle\nimgs/a.png\ta red circle\nimgs/b.png\ta cat\n")
    assert main(["captions", str(tmp_path / "sub" / "d.tsv"), "--source", "csv", "--out", str(tmp_path / "T")]) == 2
    err = capsys.readouterr().err
    assert "none of the 2 captions' images was found under" in err and "--image-root" in err
    assert len(read_table(TABLES["errors"], tmp_path / "T" / "errors")) == 2  # the rows are still there


def test_a_verbs_tables_are_its_records_reads(tmp_path):
    """macco ground / masks find the tables their stage's record reads (``Stage.reads``), not a list of their own:
    a missing one is one line naming it; an optional one (the official table) joins when present."""
    import pytest

    from data_schemas import TableError, write_table
    from flows.registry import BY_NAME
    from macco.commands_data import stage_tables

    for name in ("captions", "scene_graphs", "regions"):
        write_table(TABLES[name], tmp_path / name, TABLES[name].from_rows([]))
    assert set(stage_tables("masks", tmp_path)) == {r for r in BY_NAME["masks"].reads} == {"captions", "regions"}
    assert set(stage_tables("ground", tmp_path)) == {"captions", "scene_graphs"}  # images: the verb's flag
    write_table(TABLES["official"], tmp_path / "official", TABLES["official"].from_rows([]))
    assert set(stage_tables("ground", tmp_path)) == {"captions", "scene_graphs", "official"}
    with pytest.raises(TableError, match=r"official: no complete table captions under it"):
        stage_tables("masks", tmp_path / "official")


def test_parse_file_writes_its_captions_through_the_runner(tmp_path, capsys):
    """``macco parse FILE`` reads the file with the captions stage's record through ``run_in_folder``: OUT/captions
    is locked while it is written (another writer holding it: one line, exit 2, nothing written), and the file's bad
    lines are the captions stage's error rows."""
    import json

    from data_schemas import lock_file
    from data_schemas.locks import output_lock
    from tests_support import one_line_error

    src, out = tmp_path / "c.jsonl", tmp_path / "P"
    src.write_text("\n".join(json.dumps(r) for r in ({"id": 1, "image_id": 1, "caption": "a red circle left of a "
                                                                                         "blue square"},
                                                       {"id": 2, "image_id": 1, "caption": ""})) + "\n")
    with output_lock(lock_file(out / "captions", "output"), out / "captions"):
        assert main(["parse", str(src), "--out", str(out), "--model", "macco-micro"]) == 2
    assert f"{out / 'captions'}: another macco process is writing it" in one_line_error(capsys, "parse")
    assert not (out / "captions").exists() and not (out / "scene_graphs").exists()
    assert main(["parse", str(src), "--out", str(out), "--model", "macco-micro"]) == 0
    assert [r["caption_id"] for r in read_table(TABLES["captions"], out / "captions").to_pylist()] == [1]
    errs = read_table(TABLES["errors"], out / "errors").to_pylist()
    assert [(e["stage"], e["item_id"]) for e in errs if e["stage"] == "captions"] == [("captions", "2")]
    assert json.loads((out / "captions" / "manifest.json").read_text())["config"]["source"] == "caption-file"
