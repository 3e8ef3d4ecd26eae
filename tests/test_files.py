"""sgtune.io._files.atomic_path: the one atomic-output mechanism behind -o, --json, --plot and NetCDF traces."""
from __future__ import annotations

import os
import stat

import pytest

from sgtune.io._files import atomic_path, not_regular_reason


def test_success_renames_into_place(tmp_path):
    out = tmp_path / "a.bin"
    with atomic_path(out) as tmp:
        assert tmp != str(out) and not out.exists()
        with open(tmp, "wb") as fh:
            fh.write(b"abc")
    assert out.read_bytes() == b"abc"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]


def test_failure_leaves_destination_and_folder_untouched(tmp_path):
    out = tmp_path / "a.bin"
    out.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_path(out) as tmp:
            with open(tmp, "wb") as fh:
                fh.write(b"partial")
            raise RuntimeError("boom")
    assert out.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]


def _write(path, data=b"new"):
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_new_file_gets_the_umask_mode_not_0600(tmp_path, umask):
    old = os.umask(umask)
    try:
        _write(tmp_path / "a.bin")
        with open(tmp_path / "plain.bin", "wb"):  # what open() gives a new file under this umask
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a.bin").st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(os.stat(tmp_path / "a.bin").st_mode) == stat.S_IMODE(os.stat(tmp_path / "plain.bin").st_mode)


def test_replaced_file_keeps_its_permissions(tmp_path):
    out = tmp_path / "a.bin"
    out.write_bytes(b"old")
    os.chmod(out, 0o640)
    _write(out)
    assert out.read_bytes() == b"new" and stat.S_IMODE(os.stat(out).st_mode) == 0o640


def test_symlink_is_refused_and_its_target_untouched(tmp_path):
    target = tmp_path / "target.bin"
    target.write_bytes(b"precious")
    link = tmp_path / "link.bin"
    link.symlink_to(target)
    with pytest.raises(FileExistsError, match="symbolic link"):
        _write(link)
    assert link.is_symlink() and target.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.bin", "target.bin"]


def test_fifo_and_directory_are_refused(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(FileExistsError, match="FIFO"):
        _write(fifo)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    folder = tmp_path / "d"
    folder.mkdir()
    with pytest.raises(IsADirectoryError, match="directory"):
        _write(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "pipe"]


def test_device_is_refused(monkeypatch):
    def never(*args):  # a regression must not replace the machine's /dev/null (as root it could)
        raise AssertionError(f"os.replace{args} called on a device")

    monkeypatch.setattr(os, "replace", never)
    assert not_regular_reason("/dev/null") == "a character device"
    with pytest.raises(FileExistsError, match="character device"):
        _write("/dev/null")
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
