"""Writing the files autotune keeps where someone else may write too: the results directory (on
the CronJob's volume, which a git-sync sidecar also mounts) and the promote directory.

- ``replace``: the whole file at once (a reader never sees half of it), through a temporary
  file of a random name created only if absent and never through a symbolic link, and the
  rename replaces the path itself: a link planted there is replaced, its target untouched.
  Review findings: a predictable ``.<name>.<pid>.tmp`` opened with O_TRUNC let a writer of the
  directory make autotune (root, in the CronJob's pod) overwrite any file through a planted link;
  the same for the process registry's temporary file.
- ``open_no_link``: ``os.open`` that refuses a symbolic link at the path (ELOOP), for the files
  appended to or locked in place (the journal, the logs, the run lock).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def replace(path: Path, data: str | bytes, *, durable: bool = False) -> None:
    """Replace ``path`` with ``data`` atomically, keeping the permission bits of the file it
    replaces (a new file gets 0o666 less the umask). ``durable``: fsync the data and the rename,
    so that after a crash the old file or the new one is there, whole. Raises ``OSError``."""
    raw = data.encode() if isinstance(data, str) else data
    try:
        mode = path.lstat().st_mode & 0o7777 if not path.is_symlink() else 0o666
    except OSError:
        mode = 0o666
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if durable:
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(directory)  # the rename itself
        finally:
            os.close(directory)


def open_no_link(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags | O_NOFOLLOW | O_CLOEXEC, mode)``: a symbolic link at ``path`` is
    an ``OSError`` (ELOOP), never followed. Raises ``OSError``."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def link_hint(path: Path) -> str:
    """What to say after an error of ``open_no_link`` on ``path``: that it is a link."""
    return (" (a symbolic link, which autotune never writes through: put the file itself "
            "there, or link the directory instead)" if path.is_symlink() else "")
