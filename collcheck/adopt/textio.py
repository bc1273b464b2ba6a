"""A source file as text that goes back to disk byte for byte.

`collcheck.source.read_source` drops a BOM and is for reading only; a fix must write back the
same encoding, BOM and line endings (`\\r\\n` stays `\\r\\n`, a lone `\\r` stays `\\r`: bytes are
decoded without newline translation), so that nothing outside an edited span changes.
"""

from __future__ import annotations

import codecs
import io
import tokenize
from dataclasses import dataclass

from collcheck.lines import LINE_BREAK
from collcheck.safe_write import WriteRefused, WriteRoots, rewrite_in_place
from collcheck.source import MAX_SOURCE_BYTES, FileRefused, read_regular_file

MAX_FILE_BYTES = MAX_SOURCE_BYTES  # larger files are never analysed, so never fixed


@dataclass(frozen=True)
class Document:
    path: str
    text: str
    encoding: str
    bom: bool
    raw: bytes  # as read: the file is written back only if it still holds exactly these bytes

    def newline(self) -> str:
        """The file's own line ending, from its first line ("\\n" when it has none)."""
        first = LINE_BREAK.search(self.text)
        return first.group() if first is not None else "\n"

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
    return Document(path=path, text=text, encoding=encoding, bom=bom, raw=raw)


def write_document(document: Document, text: str, roots: WriteRoots) -> WriteRefused | None:
    """Write `text` back in the document's encoding (collcheck.safe_write.rewrite_in_place: inside
    `roots`, never through a link, only if the file is unchanged since it was read); None when
    written, else why not (`ChangedOnDisk` when an edit was saved meanwhile)."""
    try:
        rewrite_in_place(document.path, document.encoded(text), roots, document.raw)
    except WriteRefused as refused:
        return refused
    except UnicodeEncodeError as error:
        return WriteRefused(f"{document.path}: the new text cannot be encoded ({document.encoding}): {error}")
    except OSError as error:
        return WriteRefused(f"{document.path}: cannot write: {error.strerror or error}")
    return None
