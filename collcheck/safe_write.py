"""Every file collcheck writes goes through here: never through a link, never outside the project,
always whole.

In: a path, the bytes to put there, the write roots (`WriteRoots`) and, for a file rewritten in
place, the bytes it held when it was read. Out: the file replaced atomically, or `WriteRefused`
saying why nothing was written. The rules (docs/security.md, "Writers"):

* **Roots.** The folder of the pyproject.toml that configured the run, and each path named on the
  command line (a folder itself, a file its folder), each with its links resolved.
* **Rewrites in place** (`--fix`, `--unsafe-fixes`, `--add-ignore`): the file's folder, links
  resolved, must lie inside a root; a file reached through a folder link that leads out is refused.
* **Output files** (`-o`, `--write-baseline`): the user chose the place, so it may lie outside the
  roots; but a path named inside a root must still be inside it once links are resolved (a link
  committed to the repository cannot send a report elsewhere).
* **The last component is never a link**: a link there is refused, neither followed nor replaced.
  Anything but a regular file there (a folder, a FIFO) is refused too.
* **Atomic**: the bytes go to a temporary file in the same folder, which then replaces the target
  (`os.replace`); an existing file's permission bits are kept, a new file gets 0666 minus the umask.
* **Unchanged since read**: a rewrite in place compares the file's bytes with those it read right
  before replacing it; an edit saved meanwhile is never lost (`ChangedOnDisk`).

The folder is opened component by component from its root without following links, and the
temporary file is created and renamed relative to that descriptor, so a folder swapped for a link
after the check is refused rather than written through.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_DIRECTORY_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FD = os.open in os.supports_dir_fd and os.stat in os.supports_dir_fd  # not on Windows


class WriteRefused(Exception):
    """Nothing was written; the message says why."""


class ChangedOnDisk(WriteRefused):
    """The file no longer holds the bytes it held when it was read (an edit was saved meanwhile)."""


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


@dataclass(frozen=True)
class WriteRoots:
    """The folders (real paths) collcheck may write inside."""

    folders: tuple[str, ...]

    @classmethod
    def of(cls, config_folder: Path | str | None, targets: Iterable[Path | str]) -> WriteRoots:
        named = [Path(target) for target in targets]
        folders = [path if path.is_dir() else path.parent for path in named]
        if config_folder is not None:
            folders.insert(0, Path(config_folder))
        real = (os.path.realpath(folder if str(folder) else ".") for folder in folders)
        return cls(tuple(dict.fromkeys(real)))

    def holding(self, real_path: str) -> str | None:
        """The innermost root that `real_path` lies in, if any."""
        inside = [folder for folder in self.folders if _inside(real_path, folder)]
        return max(inside, key=len) if inside else None


@dataclass(frozen=True)
class _Place:
    root: str | None  # the root the folder lies in; None: outside every root (an output file)
    folder: str  # real path
    name: str


def _place(path: Path | str, roots: WriteRoots, *, inside_only: bool) -> _Place:
    lexical = os.path.abspath(path)
    name = os.path.basename(lexical)
    if name in ("", ".", ".."):
        raise WriteRefused(f"{path} is not a file name")
    folder = os.path.realpath(os.path.dirname(lexical))
    root = roots.holding(folder)
    if root is None and (inside_only or roots.holding(os.path.normpath(lexical)) is not None):
        where = ", ".join(roots.folders) or "no root"
        raise WriteRefused(f"{path} leads outside the project ({where}) through a symbolic link; not written")
    return _Place(root, folder, name)


def _open_folder(place: _Place) -> int:
    """A descriptor of the place's folder, reached from its root without following any link."""
    if place.root is None:
        return os.open(place.folder, _DIRECTORY_FLAGS)
    descriptor = os.open(place.root, _DIRECTORY_FLAGS)
    for part in Path(os.path.relpath(place.folder, place.root)).parts:
        if part == ".":
            continue
        try:
            inner = os.open(part, _DIRECTORY_FLAGS | _NOFOLLOW, dir_fd=descriptor)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise WriteRefused(f"{place.folder}: {part} became a symbolic link; not written") from None
            raise
        finally:
            os.close(descriptor)
        descriptor = inner
    return descriptor


def _existing_mode(folder: int | None, place: _Place, shown: str, link_replaced: bool) -> int | None:
    """The permission bits of the file in place, None when there is none (or a link that may be
    replaced); refuses any other link, and anything but a regular file."""
    try:
        if folder is None:
            info = os.lstat(os.path.join(place.folder, place.name))
        else:
            info = os.stat(place.name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        if link_replaced:
            return None
        raise WriteRefused(f"{shown} is a symbolic link; collcheck never writes through one")
    if not stat.S_ISREG(info.st_mode):
        raise WriteRefused(f"{shown} is not a regular file; not written")
    return stat.S_IMODE(info.st_mode)


def _current_bytes(folder: int | None, place: _Place, limit: int) -> bytes:
    flags = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
    if folder is None:
        descriptor = os.open(os.path.join(place.folder, place.name), flags)
    else:
        descriptor = os.open(place.name, flags, dir_fd=folder)
    try:
        chunks: list[bytes] = []
        size = 0
        while size <= limit:  # one byte over the limit is enough to tell it differs
            chunk = os.read(descriptor, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(descriptor)


def _temporary(folder: int | None, place: _Place) -> tuple[str, int]:
    import secrets  # only when writing

    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
    for _ in range(100):
        name = f".{place.name}.collcheck-{secrets.token_hex(6)}.tmp"
        try:
            if folder is None:
                return name, os.open(os.path.join(place.folder, name), flags, 0o666)
            return name, os.open(name, flags, 0o666, dir_fd=folder)
        except FileExistsError:
            continue
    raise WriteRefused(f"{place.folder}: no temporary file name is free")


def _replace(
    place: _Place, data: bytes, shown: str, original: bytes | None, link_replaced: bool = False
) -> None:
    folder = _open_folder(place) if _DIR_FD else None
    try:
        mode = _existing_mode(folder, place, shown, link_replaced)
        if original is not None and mode is None:
            raise ChangedOnDisk(f"{shown} was removed since it was read; not written")
        temporary, descriptor = _temporary(folder, place)
        try:
            with os.fdopen(descriptor, "wb") as stream:
                stream.write(data)
                if mode is not None and hasattr(os, "fchmod"):
                    os.fchmod(stream.fileno(), mode)
            # Checked last, right before the replace, so the window for a lost edit is as short
            # as it can be without locking.
            if original is not None and _current_bytes(folder, place, len(original)) != original:
                raise ChangedOnDisk(f"{shown} changed on disk since it was read; not written")
            _existing_mode(folder, place, shown, link_replaced)  # still not a link
            if folder is None:
                os.replace(os.path.join(place.folder, temporary), os.path.join(place.folder, place.name))
            else:
                os.replace(temporary, place.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                if folder is None:
                    os.unlink(os.path.join(place.folder, temporary))
                else:
                    os.unlink(temporary, dir_fd=folder)
            raise
    finally:
        if folder is not None:
            os.close(folder)


def rewrite_in_place(path: Path | str, data: bytes, roots: WriteRoots, original: bytes) -> None:
    """Replace the file `path`, which held `original` when read, with `data` (a fix, a suppression)."""
    _replace(_place(path, roots, inside_only=True), data, str(path), original)


def write_output(path: Path | str, data: bytes, roots: WriteRoots) -> None:
    """Write an output file the user named (a report, a baseline)."""
    _replace(_place(path, roots, inside_only=False), data, str(path), None)


def replace_below(folder: Path, target: Path, data: bytes) -> None:
    """Replace `target`, somewhere below `folder` (a folder collcheck owns: its cache), reached
    from `folder` without following links. A link in the target's place is replaced by the file,
    not followed: the folder is collcheck's own, so nothing of the user's is lost."""
    real = os.path.realpath(folder)
    relative = os.path.relpath(os.path.normpath(target.parent), os.path.normpath(folder))
    place = _Place(real, os.path.normpath(os.path.join(real, relative)), target.name)
    if not _inside(place.folder, real):
        raise WriteRefused(f"{target} is not inside {folder}; not written")
    _replace(place, data, str(target), None, link_replaced=True)
