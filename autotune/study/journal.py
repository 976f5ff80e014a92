"""The run journal: one JSON line per finished trial, flushed to disk before we move on."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune import files
from autotune.errors import StudyError


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()  # a pool's members append from their threads

    def append(self, entry: dict[str, Any]) -> None:
        """Append one line, all of it or nothing: a write that fails (disk full, read-only
        file system) is cut back off, and a line torn by an earlier crash is ended first, so
        no later line is glued to it. A failure is a ``StudyError`` naming the file."""
        data = (json.dumps(entry, sort_keys=True, default=str) + "\n").encode()
        with self._lock:
            self._append(data)

    def _append(self, data: bytes) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Never through a link planted in the results directory (autotune.files).
            fd = files.open_no_link(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
            try:
                start = os.lseek(fd, 0, os.SEEK_END)
                if start > 0 and os.pread(fd, 1, start - 1) != b"\n":
                    data = b"\n" + data
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                except OSError:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, start)
                    raise
            finally:
                os.close(fd)
        except OSError as e:
            raise StudyError(f"cannot write the run journal {self.path}: "
                             f"{e.strerror or e}{files.link_hint(self.path)}") from None

    def entries(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with self.path.open(encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line torn by a crash mid-write; the study DB has the trial
