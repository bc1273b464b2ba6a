"""Reading a file to analyse: every way it can fail becomes a FileError, never an exception."""

from __future__ import annotations

import io
import os
import stat
import tokenize
from dataclasses import dataclass
from pathlib import Path

from collcheck.findings import FileError
from collcheck.lines import line_texts, with_newlines

MAX_SOURCE_BYTES = 8 * 1024 * 1024  # generated files beyond this are reported, not parsed
MAX_CONFIG_BYTES = 16 * 1024 * 1024  # pyproject.toml, catalogs, model configs


def real_path(path: Path | str) -> Path:
    """Absolute path with links followed, without raising on a symlink loop (Path.resolve does)."""
    return Path(os.path.realpath(path))


@dataclass(frozen=True)
class SourceFile:
    path: str
    text: str

    def line(self, number: int) -> str:
        lines = line_texts(self.text)
        return lines[number - 1] if 0 < number <= len(lines) else ""


class FileRefused(Exception):
    """A path that is not a regular file of a readable size: never read (it could block or never end)."""


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular_file(path: Path | str, max_bytes: int, *, follow_links: bool = True) -> bytes:
    """The bytes of a regular file of at most `max_bytes`. Anything else (a FIFO, /dev/zero, a
    folder, a link to one of those, a file over the limit) raises FileRefused without being read;
    failures to open raise OSError. The type is checked on the opened descriptor, so a file swapped
    after the check is still caught, and opening does not block on a FIFO. With `follow_links`
    off, a symbolic link (as the last component) is refused with OSError."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    descriptor = os.open(path, flags)
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"not a regular file ({_kind(info.st_mode)}); not read")
        if info.st_size > max_bytes:
            raise FileRefused(f"file too large ({info.st_size:,} bytes > {max_bytes:,})")
        with os.fdopen(descriptor, "rb", closefd=False) as stream:
            raw = stream.read(max_bytes + 1)
    finally:
        os.close(descriptor)
    if len(raw) > max_bytes:  # it grew since fstat
        raise FileRefused(f"file too large (more than {max_bytes:,} bytes)")
    return raw


def read_source(path: Path, max_bytes: int) -> SourceFile | FileError:
    name = str(path)
    try:
        if path.is_dir():
            return FileError(name, "is a folder, not a Python file")
        raw = read_regular_file(path, max_bytes)
    except FileRefused as refused:
        return FileError(name, f"{refused}, not analysed")
    except PermissionError:
        return FileError(name, "permission denied")
    except OSError as error:
        return FileError(name, f"cannot read file: {error.strerror or error}")
    if b"\0" in raw:
        return FileError(name, "binary file (contains NUL bytes), not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        text = raw.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as error:
        return FileError(name, f"cannot decode file: {error}")
    if text.startswith("\ufeff"):
        text = text[1:]
    return SourceFile(path=name, text=with_newlines(text))
