"""Where the cache may live, and why a stored entry can be believed.

The repository being checked is untrusted, and so is anything it commits or configures:

* **Place.** `cache-dir` from a pyproject must stay inside the project, or inside the user's own
  cache folder (`$XDG_CACHE_HOME/collcheck`, else `~/.cache/collcheck`); anything else is a
  configuration error (`collcheck.config.check_configured_cache_dir`, where the pyproject is
  read). A cache folder reached through a symbolic link, or an entry that is one, is refused
  (`cache_folder`, `read_entry`, `write_entry`), so a committed `.collcheck_cache -> /elsewhere`
  cannot make collcheck write outside the project.
* **Trust.** Every entry is sealed with an HMAC under a per-user secret kept in the user's cache
  folder (created once, mode 0600). An entry written on another machine, by another user or by
  hand — a cache committed to the repository, say — fails the check and is a miss, so a cloned
  repository can never carry results into someone else's run. Without a usable secret the cache
  is simply not used.

Light on purpose: a warm run imports this, hashlib, hmac and os, nothing else (tempfile and
secrets only when something is written).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import stat
from pathlib import Path

from collcheck.config import ConfigError, Settings, user_cache_root
from collcheck.source import FileRefused, read_regular_file

SECRET_NAME = "secret.key"
MAX_ENTRY_BYTES = 256 * 1024 * 1024  # a run manifest of a very large tree stays below this
_MAC_LENGTH = 64  # hex digits of a sha256 HMAC


class CacheRefused(ConfigError):
    """The cache folder is somewhere collcheck will not read or write; the CLI exits with code 2."""


def _link_below(base: Path, target: Path) -> Path | None:
    """The first symbolic link on the way from `base` (not included) down to `target`, if any."""
    try:
        parts = Path(os.path.normpath(target)).relative_to(os.path.normpath(base)).parts
    except ValueError:
        return None
    current = Path(os.path.normpath(base))
    for part in parts:
        current = current / part
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return current
        except OSError:
            return None  # not there yet: nothing below it can be a link either
    return None


def cache_folder(settings: Settings) -> Path:
    """The cache folder for these settings; CacheRefused if it is, or lies behind, a symbolic link."""
    configured = Path(settings.cache_dir)
    # Normalised before use, so that the path checked for links is the path written to (the OS
    # would resolve `link/..` through the link, normpath does not).
    if configured.is_absolute():
        folder = Path(os.path.normpath(configured))
        base = folder.parent
    else:
        base = Path(os.path.realpath(settings.root))
        folder = Path(os.path.normpath(base / configured))
    link = _link_below(base, folder)
    if link is not None:
        raise CacheRefused(
            f"refusing the cache folder {folder}: {link} is a symbolic link "
            "(remove it, or run with --no-cache)"
        )
    return folder


# --- the per-user secret -------------------------------------------------------------------------

_SECRETS: dict[str, bytes | None] = {}


def _read_secret(path: Path) -> bytes | None:
    try:
        raw = read_regular_file(path, 4096, follow_links=False)
    except (OSError, FileRefused):
        return None
    text = raw.strip()
    return text if len(text) >= 32 else None


def _create_secret(path: Path) -> None:
    import secrets  # with tempfile: imported only when writing (a warm run writes nothing)
    import tempfile

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".secret-")  # created 0600
    try:
        with os.fdopen(handle, "w", encoding="ascii") as stream:
            stream.write(secrets.token_hex(32) + "\n")
        os.link(temporary, path)  # atomic, and never replaces a secret another process made first
    except FileExistsError:
        pass
    finally:
        os.unlink(temporary)


def user_secret() -> bytes | None:
    """The user's cache secret, created on first use; None if the user's cache folder is unusable."""
    path = user_cache_root() / SECRET_NAME
    key = str(path)
    if key not in _SECRETS:
        found = _read_secret(path)
        if found is None:
            with contextlib.suppress(OSError):
                _create_secret(path)
            found = _read_secret(path)
        _SECRETS[key] = found
    return _SECRETS[key]


# --- sealed entries ------------------------------------------------------------------------------


def _mac(secret: bytes, name: str, payload: bytes) -> bytes:
    # The entry's name is sealed too: an entry cannot be moved to answer for another key.
    message = name.encode("utf-8", "surrogateescape") + b"\0" + payload
    return hmac.new(secret, message, hashlib.sha256).hexdigest().encode()


def _name(folder: Path, target: Path) -> str:
    return Path(os.path.normpath(target)).relative_to(os.path.normpath(folder)).as_posix()


def read_entry(folder: Path, target: Path) -> str | None:
    """The payload stored at `target` (inside `folder`), or None: absent, unreadable, a link, or
    not sealed by this user's secret."""
    secret = user_secret()
    if secret is None or _link_below(folder, target.parent) is not None:
        return None
    try:
        raw = read_regular_file(target, MAX_ENTRY_BYTES, follow_links=False)
    except (OSError, FileRefused, ValueError):
        return None
    mac, payload = raw[:_MAC_LENGTH], raw[_MAC_LENGTH + 1 :]
    if not hmac.compare_digest(mac, _mac(secret, _name(folder, target), payload)):
        return None
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return None


def write_entry(folder: Path, target: Path, payload: str) -> bool:
    """Seal and store `payload` at `target`; False when there is no secret, a link is in the way,
    or the folder cannot be written. Writes go to a temporary file first, then replace the entry."""
    secret = user_secret()
    if secret is None:
        return False
    try:
        _ensure_folder(folder)
        # Checked before creating the entry's folders (they would be made through a link) and after;
        # a link in the entry's own place is replaced by the entry, never written through.
        if _link_below(folder, target.parent) is not None:
            return False
        target.parent.mkdir(parents=True, exist_ok=True)
        if _link_below(folder, target.parent) is not None:
            return False
        data = payload.encode("utf-8")
        sealed = _mac(secret, _name(folder, target), data) + b"\n" + data
        _write_atomically(folder, target, sealed)
    except (OSError, ValueError):
        return False
    return True


def _ensure_folder(folder: Path) -> None:
    """Create the cache folder; the `.gitignore` (`*`) goes only into a folder made here, so it
    never lands in a folder that holds anything but the cache (a source folder named as cache-dir)."""
    try:
        folder.mkdir(parents=True)
    except FileExistsError:
        return
    _write_atomically(folder, folder / ".gitignore", b"# Automatically created by collcheck.\n*\n")


def _write_atomically(folder: Path, target: Path, data: bytes) -> None:
    from collcheck.safe_write import WriteRefused, replace_below  # only when writing

    try:
        replace_below(folder, target, data)  # a link in the entry's place is replaced, never followed
    except WriteRefused as refused:
        raise OSError(str(refused)) from None
