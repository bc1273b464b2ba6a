"""A source file as text that goes back to disk byte for byte.

`collcheck.source.read_source` drops a BOM and is for reading only; a fix must write back the
same encoding, BOM and line endings (`\\r\\n` stays `\\r\\n`: bytes are decoded without newline
translation), so that nothing outside an edited span changes.
"""

from __future__ import annotations

import codecs
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

from collcheck.source import MAX_SOURCE_BYTES, FileRefused, read_regular_file

MAX_FILE_BYTES = MAX_SOURCE_BYTES  # larger files are never analysed, so never fixed


@dataclass(frozen=True)
class Document:
    path: str
    text: str
    encoding: str
    bom: bool

    def newline(self) -> str:
        """The file's own line ending, from its first line ("\\n" when it has none)."""
        end = self.text.find("\n")
        return "\r\n" if end > 0 and self.text[end - 1] == "\r" else "\n"

    def encoded(self, text: str) -> bytes:
        return (codecs.BOM_UTF8 if self.bom else b"") + text.encode(self.encoding)


def read_document(path: str) -> Document | None:
    """The file's text, or None when it cannot be read or decoded (it is then left alone)."""
    try:
        raw = read_regular_file(path, MAX_FILE_BYTES)
    except (OSError, FileRefused):
        return None
    if b"\0" in raw:
        return None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError:
        return None
    bom = raw.startswith(codecs.BOM_UTF8)
    if encoding == "utf-8-sig":
        encoding = "utf-8"
    try:
        text = raw[len(codecs.BOM_UTF8) if bom else 0 :].decode(encoding)
    except (LookupError, UnicodeDecodeError):
        return None
    return Document(path=path, text=text, encoding=encoding, bom=bom)


def write_document(document: Document, text: str) -> bool:
    """Write `text` back in the document's encoding; False when it cannot be encoded or written."""
    try:
        data = document.encoded(text)
        Path(document.path).write_bytes(data)
    except (OSError, UnicodeEncodeError):
        return False
    return True


def physical_lines(text: str) -> list[str]:
    """Lines as the tokenizer counts them (split after each "\\n" only; `str.splitlines` also
    splits at form feeds and other characters), each with its line ending."""
    lines = text.split("\n")
    ended = [line + "\n" for line in lines[:-1]]
    return [*ended, lines[-1]] if lines[-1] else ended
