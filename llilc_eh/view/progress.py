"""Progress of a batch run, counted in methods, with an ETA (`validate` on a terminal).

Why methods, not files: one file (CoreLib) is a quarter of the corpus's EH methods, so a bar
that ticks per file stands still for minutes and its ETA means nothing. The batch reports
events -- a file opened with n EH methods, one method through the pipeline, a file done --
from this process or, through a multiprocessing queue, from its worker processes
(`batch._emit`); this module turns them into rich's progress bar (rich computes the speed
and the time remaining). The total grows as files are opened; until then the unopened files
count by size at the methods-per-byte rate of the opened ones (largest files first, so the
estimate settles early).

Not a terminal: one line per finished file, `[k/N] NAME (m/M EH methods)`, as before -- a
log, not an animation.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path


class BatchProgress:
    """A context manager fed with `event` (any thread) and `file_done` (the caller's thread)."""

    def __init__(self, files: list[str], enabled: bool = True, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = enabled and self.stream.isatty()
        self.files = list(dict.fromkeys(files))
        self.size = {f: (os.path.getsize(f) if os.path.exists(f) else 0) for f in self.files}
        self.opened: dict[str, int] = {}         # file -> its EH methods
        self.counted: dict[str, int] = {}        # file -> methods advanced so far
        self.done_files = 0
        self.done_methods = 0
        self._lock = threading.Lock()
        self._progress = None
        self._task = None

    def __enter__(self) -> "BatchProgress":
        if self.tty:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            self._progress = Progress(
                TextColumn("{task.fields[files]}"), BarColumn(), MofNCompleteColumn(), TextColumn("methods"),
                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[current]}"),
                console=Console(file=self.stream), transient=False, refresh_per_second=4)
            self._progress.start()
            self._task = self._progress.add_task("validate", total=None, files=self._files_text(),
                                                 current="")
        return self

    def __exit__(self, *exc) -> bool:
        if self._progress is not None:
            self._progress.stop()
        return False

    def _files_text(self) -> str:
        return f"{self.done_files}/{len(self.files)} files"

    def _total(self) -> int | None:
        """EH methods of the opened files, plus the unopened ones estimated by size."""
        known = sum(self.opened.values())
        opened_bytes = sum(self.size[f] for f in self.opened if f in self.size)
        rest = sum(s for f, s in self.size.items() if f not in self.opened)
        if not opened_bytes:
            return None
        return known + round(known / opened_bytes * rest)

    def event(self, event: tuple) -> None:
        """("start", path, eh_methods) | ("method", path): from `batch._emit`."""
        with self._lock:
            kind, path = event[0], event[1]
            if kind == "start":
                self.opened[path] = event[2]
                self.counted.setdefault(path, 0)
                self._update(current=Path(path).name)
            elif kind == "method":
                self.counted[path] = self.counted.get(path, 0) + 1
                self.done_methods += 1
                self._update(current=Path(path).name)

    def file_done(self, path: str, eh_methods: int) -> None:
        """A file's report arrived: its methods not yet counted (IL failures, or a run without
        per-method events) are counted now."""
        with self._lock:
            self.done_files += 1
            self.opened[path] = eh_methods
            rest = max(0, eh_methods - self.counted.get(path, 0))
            self.counted[path] = eh_methods
            self.done_methods += rest
            if self.tty:
                self._update(current="")
            elif self.enabled:
                self.stream.write(f"[{self.done_files}/{len(self.files)}] {Path(path).name} "
                                  f"({self.done_methods}/{self._total() or self.done_methods} EH methods)\n")
                self.stream.flush()

    def _update(self, current: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=self.done_methods, total=self._total(),
                                  files=self._files_text(), current=current[:40])
