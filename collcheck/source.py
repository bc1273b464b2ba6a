"""Reading a file to analyse: every way it can fail becomes a FileError, never an exception."""

from __future__ import annotations

import io
import os
import tokenize
from dataclasses import dataclass
from pathlib import Path

from collcheck.findings import FileError


def real_path(path: Path | str) -> Path:
    """Absolute path with links followed, without raising on a symlink loop (Path.resolve does)."""
    return Path(os.path.realpath(path))


@dataclass(frozen=True)
class SourceFile:
    path: str
    text: str

    def line(self, number: int) -> str:
        lines = self.text.splitlines()
        return lines[number - 1] if 0 < number <= len(lines) else ""


def read_source(path: Path, max_bytes: int) -> SourceFile | FileError:
    name = str(path)
    try:
        if path.is_dir():
            return FileError(name, "is a folder, not a Python file")
        raw = path.read_bytes()
    except PermissionError:
        return FileError(name, "permission denied")
    except OSError as error:
        return FileError(name, f"cannot read file: {error.strerror or error}")
    if len(raw) > max_bytes:
        return FileError(name, f"file too large to analyse ({len(raw):,} bytes > {max_bytes:,})")
    if b"\0" in raw:
        return FileError(name, "binary file (contains NUL bytes), not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        text = raw.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as error:
        return FileError(name, f"cannot decode file: {error}")
    if text.startswith("\ufeff"):
        text = text[1:]
    return SourceFile(path=name, text=text)
