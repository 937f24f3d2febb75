"""Copy-out from a scratch folder: regular files by plain names only, links and FIFOs refused, caps by size,
and a large file streams (full-size arrays run to hundreds of MiB)."""

import os

import numpy as np
import pytest

from maxkernel.harness.verdict.arrays import load_arrays, save_arrays
from maxkernel.harness.sandbox.copyout import CopyOutError, copy_tree, open_regular, read_bytes, read_json

pytestmark = pytest.mark.unit


def test_plain_regular_files_only(tmp_path):
    (tmp_path / "ok.json").write_text('{"a": 1}')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f").write_bytes(b"x")
    os.symlink(tmp_path / "ok.json", tmp_path / "link.json")
    os.symlink(tmp_path / "sub", tmp_path / "linkdir")
    os.mkfifo(tmp_path / "fifo")
    assert read_json(tmp_path, "ok.json") == {"a": 1} and read_bytes(tmp_path, "sub/f") == b"x"
    for rel, why in [("link.json", "a symbolic link"), ("linkdir/f", "on the way"), ("fifo", "not a regular file"),
                     ("../x", "not a plain name"), ("/etc/passwd", "not a plain name"), ("nope", "No such file")]:
        with pytest.raises(CopyOutError, match=why):
            read_bytes(tmp_path, rel)
    with pytest.raises(CopyOutError, match="over the 4-byte limit"):
        read_bytes(tmp_path, "ok.json", limit=4)


def test_a_large_array_file_is_streamed_not_refused(tmp_path):
    big = np.arange(80 << 20, dtype=np.uint8)  # 80 MiB, past the old cap's order of magnitude for arrays
    save_arrays(tmp_path / "out.npz", [big])
    with open_regular(tmp_path, "out.npz") as f:
        (got,) = load_arrays(f)
    assert got.shape == big.shape and got[-1] == big[-1]


def test_copy_tree_takes_files_and_names_what_it_skipped(tmp_path):
    src = tmp_path / "s" / "trace"
    (src / "a").mkdir(parents=True)
    (src / "a" / "x.pb").write_bytes(b"pb")
    os.symlink("/etc/passwd", src / "leak")
    out = copy_tree(tmp_path / "s", "trace", tmp_path / "dest")
    assert out.copied == ["a/x.pb"] and out.skipped == ["leak: a symbolic link"]
    assert (tmp_path / "dest" / "a" / "x.pb").read_bytes() == b"pb" and not (tmp_path / "dest" / "leak").exists()
