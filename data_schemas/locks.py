"""The output lock every writer of a stage's output takes (the runner for the flow and the verbs, and
``python -m model.train`` under ``torchrun``, whose rank 0 takes it on its ``out_dir``): one exclusive ``flock`` on
``lock_file(output, "output")`` beside what it locks, held while the writer decides about it and writes it, so a
second writer fails at once with one line naming the holder. Here, below flows and model, so both take the same one.
"""
from __future__ import annotations

import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from ._spec import InputFileError


class StageLocked(InputFileError):
    """Another process writes this output now."""


@contextmanager
def output_lock(lock_file: Path, what: Path):
    """An exclusive lock on one output (``what``) held while this process decides about it and writes it: a
    second writer fails at once with one line naming the holder, instead of interleaving with the first.

    The lock file is never followed: a symbolic link at its path (``O_NOFOLLOW``), a hard link to another file or
    anything but a regular file is refused in one line, so the holder line this writes never lands in a file the
    runner did not make."""
    import fcntl
    import stat

    lock_file.parent.mkdir(parents=True, exist_ok=True)
    how = "remove it (nothing in a lock file is needed once no macco process holds it) and rerun"
    try:  # O_NONBLOCK: a FIFO put at the lock path is refused below, never waited on
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if lock_file.is_symlink():
            raise InputFileError(f"{lock_file}: the lock file is a symbolic link (to {os.readlink(lock_file)}); the "
                                 f"runner never writes through a link it did not make: {how}") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        kind = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"a hard link ({st.st_nlink} names)"
        raise InputFileError(f"{lock_file}: the lock file is {kind}; the runner never writes into a file it did not "
                             f"make: {how}")
    os.set_blocking(fd, True)
    f = os.fdopen(fd, "r+")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise StageLocked(f"{what}: another macco process is writing it ({holder}; lock {lock_file}); wait for "
                              "it to finish, then rerun (finished stages come back Cached)") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        f.flush()
        yield
    finally:
        f.close()  # closing releases the lock
