"""data_schemas/provenance.py: a code version covers the import closure's sources and the data files each module
declares (``DATA_FILES``), read from the files (nothing imported); every data file the packages ship is declared;
a folder of inputs is fingerprinted by what it holds."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from data_schemas import provenance
from data_schemas.provenance import code_files, data_files, folder_fingerprint

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("data_schemas", "pipeline", "model", "flows", "macco")


def test_every_data_file_the_packages_ship_is_declared_by_the_code_reading_it():
    """A JSON read by the code and declared by none would be a stale-result hole: every non-Python file under the
    packages is some module's ``DATA_FILES``."""
    declared: set[Path] = set()
    shipped: set[Path] = set()
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*"):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            if path.suffix == ".py":
                rel = path.relative_to(REPO).with_suffix("")
                name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
                declared |= set(data_files(name))
            else:
                shipped.add(path)
    assert shipped and shipped <= declared, sorted(str(p) for p in shipped - declared)
    assert REPO / "model" / "configs" / "macco-tiny.json" in code_files("model.train")


def test_a_bad_declaration_is_an_error_naming_the_module(tmp_path, monkeypatch):
    pkg = tmp_path / "pkgx"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("DATA_FILES = ('missing/*.json',)\n")
    (pkg / "b.py").write_text("DATA_FILES = tuple(str(i) for i in range(2))\n")
    monkeypatch.setattr(provenance, "REPO", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"a\.py: DATA_FILES entry 'missing/\*\.json' matches no file"):
        data_files("pkgx.a")
    with pytest.raises(ValueError, match=r"b\.py:1: DATA_FILES must be a literal tuple"):
        data_files("pkgx.b")


def test_a_code_version_imports_nothing():
    code = ("import sys\nfrom data_schemas.provenance import closure_version\nclosure_version('model.train')\n"
            "assert 'torch' not in sys.modules and 'model.train' not in sys.modules")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, env=env)


def test_a_folder_fingerprint_sees_a_corrected_file_of_the_same_size(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "ann.json").write_text('{"label": 1}')
    image = tmp_path / "images" / "a.jpg"
    image.write_bytes(b"jpeg")
    first = folder_fingerprint(tmp_path)
    assert folder_fingerprint(tmp_path) == first
    (tmp_path / "ann.json").write_text('{"label": 2}')
    second = folder_fingerprint(tmp_path)
    assert second != first
    os.utime(image, ns=(1, 1))  # an image replaced in place: its time stands in for its bytes
    assert folder_fingerprint(tmp_path) != second
    assert folder_fingerprint(tmp_path / "nope") == [str(tmp_path / "nope"), None]



def test_code_versions_computed_in_threads_parse_one_file_at_a_time(monkeypatch):
    """A grounding stage's shards run in threads and each computed its code version: CPython 3.11's ``ast.parse`` in
    two threads at once raised ``SystemError: AST constructor recursion depth mismatch`` and failed the flow. Every
    parse now holds one lock: never two at once, and the threads' versions agree."""
    import ast
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from data_schemas.provenance import code_files

    real, now, most, count = ast.parse, [0], [0], threading.Lock()

    def parse(*a, **kw):
        with count:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.002)  # a thread switch mid-parse, every time
        try:
            return real(*a, **kw)
        finally:
            with count:
                now[0] -= 1

    monkeypatch.setattr(ast, "parse", parse)
    roots = ("data_schemas.provenance", "data_schemas.config")
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: code_files.__wrapped__(*roots), range(8)))
    assert most[0] == 1 and len(set(got)) == 1 and got[0]
