"""Faults at the CLI (macco/cli.py): a missing input file or table is one line; programming errors are not swallowed."""
import pytest

from macco.cli import main
from tests_support import CAPTION as GOOD, coco_json, strict_one_line_error as one_line_error


def test_missing_input_file_and_missing_tables_are_one_line(tmp_path, capsys):
    assert main(["parse", str(tmp_path / "nope.json"), "--out", str(tmp_path / "o")]) == 2
    assert "nope.json: file not found" in one_line_error(capsys, "parse")
    (tmp_path / "empty").mkdir()
    assert main(["ground", str(tmp_path / "empty")]) == 2
    assert "table captions" in one_line_error(capsys, "ground")


def test_programming_errors_are_not_swallowed(tmp_path, monkeypatch):
    import pipeline.captions

    def broken(*a, **k):
        raise ValueError("a bug, not an input problem")

    monkeypatch.setattr(pipeline.captions, "read_caption_file", broken, raising=False)
    monkeypatch.setattr(pipeline.captions, "read_coco_captions", broken)
    src = coco_json(tmp_path / "captions_train2014.json", [{"id": 1, "image_id": 1, "caption": GOOD}])
    with pytest.raises(ValueError, match="a bug"):
        main(["parse", str(src), "--out", str(tmp_path / "o")])


def test_a_file_size_limit_is_one_line(tmp_path):
    """`ulimit -f`: EFBIG was missing from the user's errnos (a pyarrow traceback); no table is left complete."""
    import resource
    import subprocess
    import sys

    from data_schemas import is_complete

    src = coco_json(tmp_path / "captions_train2014.json", [{"id": i, "image_id": 1, "caption": GOOD} for i in range(50)])

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

    r = subprocess.run([sys.executable, "-m", "macco.cli", "parse", str(src), "--out", str(tmp_path / "o")],
                       preexec_fn=limit, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr[-2000:]
    assert "File too large (errno 27)" in r.stderr
    assert not is_complete(tmp_path / "o" / "captions")
