"""Progress of `validate`: on a terminal rich's bar counted in EH methods with the time
remaining (driven through a real pseudo-terminal), else one line per finished file."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

import pytest

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.cli import sample_path

ZIPFILE = Corpus().framework_dir / "System.IO.Compression.ZipFile.dll"   # 9 EH methods; the sample 67
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_a_terminal(*args: str) -> tuple[int, str]:
    """Run `llilc-eh ARGS` with stderr on a pseudo-terminal; (exit status, what it showed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "llilc_eh.cli", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:                     # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=600), ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_bar_counts_methods_with_an_eta(jobs):
    rc, shown = on_a_terminal("validate", str(sample_path()), str(ZIPFILE), "--translate", "--jobs", jobs)
    assert rc == 0
    frames = [f for f in re.split(r"[\r\n]", shown) if "methods" in f and "files" in f]
    assert frames and "ETA" in frames[-1]
    assert re.search(r"2/2 files .* 76/76 methods", frames[-1]), frames[-1]
    # Per method, not per file: some frame shows a count that is no file boundary (0, 9, 67 or 76).
    counts = {int(m.group(1)) for f in frames for m in [re.search(r"(\d+)/(\d+|\?) methods", f)] if m}
    assert counts - {0, 9, 67, 76}, counts


def test_not_a_terminal_one_line_per_file():
    r = subprocess.run([sys.executable, "-m", "llilc_eh.cli", "validate", str(sample_path()), str(ZIPFILE)],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0
    lines = r.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("[1/2] ") and lines[1].startswith("[2/2] ")
    assert lines[1].endswith("(76/76 EH methods)")
