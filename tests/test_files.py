"""sgtune.io._files.atomic_path: the one atomic-output mechanism behind -o, --json, --plot and NetCDF traces."""
from __future__ import annotations

import pytest

from sgtune.io._files import atomic_path


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
