"""The database's writer lock (store/writer_lock.py): one coordinator per file, never waited for, and a lock
file that is not a plain file of ours is one line, never followed or written through."""

from __future__ import annotations

import os
import pathlib

import pytest

from sparkwatch.store import StoreError
from sparkwatch.store.writer_lock import DatabaseInUse, lock_path, writer_lock


def test_a_second_holder_is_refused_with_the_first_ones_pid_until_it_lets_go(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "c.db"
    with writer_lock(db) as made:
        assert made and lock_path(db).read_text() == f"{os.getpid()}\n"
        with pytest.raises(DatabaseInUse) as caught, writer_lock(db):
            pass
        assert str(caught.value).startswith(f"database {db} is in use by another sparkwatch coordinator (pid")
        assert f"(pid {os.getpid()})" in str(caught.value) and "\n" not in str(caught.value)
    with writer_lock(db) as made:  # let go at the block's end; the file stays, not made again
        assert not made


def test_two_names_of_one_database_share_its_lock(tmp_path: pathlib.Path) -> None:
    (tmp_path / "real").mkdir()
    db = tmp_path / "real" / "c.db"
    db.touch()
    (tmp_path / "alias.db").symlink_to(db)
    assert lock_path(tmp_path / "alias.db") == tmp_path / "real" / "c.db.lock"
    with writer_lock(db), pytest.raises(DatabaseInUse), writer_lock(tmp_path / "alias.db"):
        pass


def test_a_lock_file_that_is_a_symlink_is_not_followed(tmp_path: pathlib.Path) -> None:
    """Opened through the link, the pid would have been written over the file it names."""
    victim = tmp_path / "important.txt"
    victim.write_text("keep me\n")
    db = tmp_path / "c.db"
    lock_path(db).symlink_to(victim)
    with pytest.raises(StoreError, match=r"c\.db\.lock: Too many levels of symbolic links"), writer_lock(db):
        pass
    assert victim.read_text() == "keep me\n"


def test_a_lock_file_that_is_not_a_file_is_one_line(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "c.db"
    os.mkfifo(lock_path(db))
    with pytest.raises(StoreError, match=r"c\.db\.lock is not a regular file$"), writer_lock(db):
        pass


def test_a_database_in_a_folder_that_does_not_exist_names_the_folder(tmp_path: pathlib.Path) -> None:
    """It named the lock file (`…/x.db.lock: No such file or directory`), which the user never gave."""
    db = tmp_path / "nofolder" / "x.db"
    with pytest.raises(StoreError) as caught, writer_lock(db):
        pass
    assert str(caught.value) == f"cannot use database {db}: its folder {tmp_path / 'nofolder'} does not exist"
    assert not (tmp_path / "nofolder").exists()
