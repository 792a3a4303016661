"""Referenced assemblies opened once per process (`assembly.resolve._OPENED`): every Binder of
a batch gets the same `Assembly` for the same unchanged file, a rewritten file is opened
afresh, the same file named by another path is not shared, and the cache stays bounded."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from llilc_eh.assembly import resolve
from llilc_eh.assembly.resolve import Binder

SAMPLE = Path(resolve.__file__).resolve().parents[1] / "data" / "sample.dll"


@pytest.fixture(autouse=True)
def empty_cache(monkeypatch):
    monkeypatch.setattr(resolve, "_OPENED", {})


def test_binders_share_an_unchanged_file(tmp_path):
    path = tmp_path / "sample.dll"
    shutil.copyfile(SAMPLE, path)
    a = Binder(tmp_path / "app.dll").open(path)
    b = Binder(tmp_path / "other.dll").open(path)
    assert a[1] is not None and a[2] is None
    assert b[1] is a[1]                      # one Assembly for both binders


def test_a_rewritten_file_is_opened_again(tmp_path):
    path = tmp_path / "sample.dll"
    shutil.copyfile(SAMPLE, path)
    first = Binder(tmp_path / "app.dll").open(path)[1]
    data = path.read_bytes()
    path.write_bytes(data + b"\0" * 16)      # another size (and mtime): another file
    second = Binder(tmp_path / "app.dll").open(path)[1]
    assert second is not first and second is not None
    os.utime(path, ns=(1, 1))                # same size, another mtime
    third = Binder(tmp_path / "app.dll").open(path)[1]
    assert third is not second


def test_another_path_to_the_file_is_not_shared(tmp_path):
    """The same real file named through a symlink keeps its own Assembly (its path as named
    is what the Assembly says), as a Binder did before the cache."""
    path = tmp_path / "sample.dll"
    shutil.copyfile(SAMPLE, path)
    (tmp_path / "lib").mkdir()
    link = tmp_path / "lib" / "sample.dll"
    link.symlink_to(path)
    direct = Binder(tmp_path / "app.dll").open(path)[1]
    linked = Binder(tmp_path / "app.dll").open(link)[1]
    assert linked is not direct and str(linked.path) == str(link)


def test_the_cache_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(resolve, "_OPENED_LIMIT", 2)
    paths = []
    for n in range(3):
        p = tmp_path / f"s{n}.dll"
        shutil.copyfile(SAMPLE, p)
        paths.append(p)
    first = Binder(tmp_path / "app.dll").open(paths[0])[1]
    for p in paths[1:]:
        Binder(tmp_path / "app.dll").open(p)
    assert len(resolve._OPENED) == 2
    assert Binder(tmp_path / "app.dll").open(paths[0])[1] is not first   # the oldest went
