"""#48 item 5: a source of 0 usable pairs passed the captions stage (and ``macco validate``), and failed later as a
traceback in training. The captions stage (pipeline/captions_stage.py ``refuse_empty``) refuses it in one line, the
first stage that sees it, its error rows kept."""
from __future__ import annotations

import pytest

from data_schemas import InputFileError
from macco.cli import main
from tests_support import png, read_errors as errors


def test_a_source_without_rows_is_one_line_at_the_captions_stage(tmp_path, capsys):
    (tmp_path / "d.tsv").write_text("filepath\ttitle\n")
    assert main(["captions", str(tmp_path / "d.tsv"), "--source", "csv", "--out", str(tmp_path / "T")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "the source holds no image-text pair" in line and "d.tsv" in line


def test_a_source_whose_every_row_is_refused_names_the_reasons_and_keeps_the_rows(tmp_path, capsys):
    png(tmp_path / "a.png")
    (tmp_path / "d.tsv").write_text("filepath\ttitle\na.png\t \na.png\t\n")
    assert main(["captions", str(tmp_path / "d.tsv"), "--source", "csv", "--out", str(tmp_path / "T")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    rows = errors(tmp_path / "T")
    assert len(rows) == 2 and "0 usable pairs, 2 rows refused (" in line
    assert f"{rows[0]['reason']}=" in line and str(tmp_path / "T" / "errors") in line


def test_the_flow_record_refuses_it_before_any_later_stage(tmp_path):
    """The same rule in the record the flow runs (``run_in_folder`` runs the flow's record)."""
    from flows.catalog import Catalog
    from flows.runner import run_in_folder
    from pipeline.captions_stage import CaptionsConfig

    (tmp_path / "d.tsv").write_text("filepath\ttitle\n")
    cfg = CaptionsConfig(source="csv", path=str(tmp_path / "d.tsv"))
    with pytest.raises(InputFileError, match="holds no image-text pair"):
        run_in_folder("captions", cfg, Catalog(), tmp_path / "T", log=lambda _: None)
