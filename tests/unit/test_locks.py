"""data_schemas/locks.py: the one output lock (the runner's, the verbs', the DDP entry's): a holder line written
into the lock file, a second holder refused at once naming it, a lock file that is a link never followed."""
from __future__ import annotations

import os

import pytest

from data_schemas import InputFileError, lock_file
from data_schemas.locks import StageLocked, output_lock


def test_one_holder_at_a_time_named_in_the_lock_file(tmp_path):
    what = tmp_path / "out"
    lock = lock_file(what, "output")
    assert lock == tmp_path / ".out.output.lock"
    with output_lock(lock, what):
        assert lock.read_text().startswith(f"pid {os.getpid()} on ")
        with pytest.raises(StageLocked, match=rf"{what}: another macco process is writing it \(pid {os.getpid()} "):
            with output_lock(lock, what):  # another open file description: refused, even in this process
                pass
    with output_lock(lock, what):  # released on leaving
        pass


def test_a_lock_file_that_is_a_link_is_refused_and_left_alone(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep")
    lock = lock_file(tmp_path / "out", "output")
    lock.symlink_to(target)
    with pytest.raises(InputFileError, match="the lock file is a symbolic link"):
        with output_lock(lock, tmp_path / "out"):
            pass
    assert target.read_text() == "keep"
