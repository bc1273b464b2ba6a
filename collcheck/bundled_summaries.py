"""Bundled summaries: what pinned releases of frameworks communicate, learnt from their source.

In: a package's name and the version installed (or none), or the files a run checks. Out: the
catalog TOML text of `rules/summaries/PACKAGE-VERSION.toml` (made by bench/bundled_summaries.py
from the released wheels), for `catalog.settings_catalog` to read before the bundled catalogs.

Which release: the installed version's summary when one is bundled; for a package the run's files
import but that is not installed where collcheck looks (no environment, or not in it), the newest
bundled release, the best knowledge there is (as the hand-written catalogs, which speak of no
version). Light on purpose: a run whose files import no bundled package lists one folder and
searches each file's bytes once (a warm run only stats them: the answers are kept in the project's
cache by each file's size and modification time); nothing is parsed or imported.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import replace
from functools import cache
from pathlib import Path

from collcheck.catalog import bundled_catalog_dir
from collcheck.config import Settings
from collcheck.import_scan import imported_names
from collcheck.source import MAX_SOURCE_BYTES, FileRefused, read_regular_file

BUNDLED_SUMMARIES = bundled_catalog_dir() / "summaries"  # PACKAGE-VERSION.toml, made from releases
MAX_SUMMARY_BYTES = 16 * 1024 * 1024


def with_bundled_summaries(settings: Settings, root: Path | None, files: list[Path]) -> Settings:
    """`settings` with the newest bundled summary of each bundled package the files import, for a
    run without an environment; none for a package the run checks itself (the project's own
    package, or files under a folder of that name: a check of deepspeed's own source)."""
    documents = []
    for package in sorted(_imported_by_stat(settings, files)):
        if project_owns(package, root) or any(package in file.parts[:-1] for file in files):
            continue
        newest = newest_bundled_summary(package)
        if newest is not None:
            documents.append(newest)
    return replace(settings, summary_documents=tuple(documents)) if documents else settings


def _imported_by_stat(settings: Settings, files: list[Path]) -> set[str]:
    """`bundled_packages_imported`, each file's answer kept in the project's cache by its size and
    modification time: a warm run stats the files instead of reading them."""
    from collcheck.cache import file_stamp, load_import_scan, store_import_scan

    scanned_for = ",".join(sorted(bundled_releases()))
    if not scanned_for:
        return set()
    table = load_import_scan(settings, scanned_for)
    found: set[str] = set()
    changed = False
    for path in files:
        name, stamp = str(path), file_stamp(str(path))
        entry = table.get(name)
        if stamp is not None and isinstance(entry, list) and len(entry) == 2 and entry[0] == stamp:
            found.update(str(package) for package in entry[1])
            continue
        imported = bundled_packages_imported([path])
        found |= imported
        if stamp is not None:
            table[name] = [stamp, sorted(imported)]
            changed = True
    if changed:
        store_import_scan(settings, scanned_for, table)
    return found


def project_owns(package: str, root: Path | None) -> bool:
    """A folder or file of that name at the project's root or under `src/`."""
    if root is None:
        return False
    return any(os.path.exists(os.path.join(root, *where, package)) for where in ((), ("src",)))


def bundled_summary_name(package: str, version: str) -> str:
    return f"{package}-{version}.toml"


def bundled_summary(package: str, version: str | None) -> tuple[str, str] | None:
    """(file name, TOML text) of the summary shipped with collcheck for this version
    (`bench/bundled_summaries.py`): the exact version's, else its public release's (`2.13.0` for
    an installed `2.13.0+cpu`: a local label names a build of the same source, torch's CPU or
    CUDA wheels)."""
    if version is None:
        return None
    for release in dict.fromkeys((version, version.partition("+")[0])):
        text = _read(bundled_summary_name(package, release)) if release else None
        if text is not None:
            return bundled_summary_name(package, release), text
    return None


@cache
def bundled_releases() -> dict[str, str]:
    """Package -> its newest bundled version (one listing of the folder)."""
    try:
        names = os.listdir(BUNDLED_SUMMARIES)
    except OSError:
        return {}
    newest: dict[str, str] = {}
    for name in names:
        package, dash, version = name.removesuffix(".toml").partition("-")
        if not name.endswith(".toml") or not dash or not package.isidentifier():
            continue
        if package not in newest or _version_key(version) > _version_key(newest[package]):
            newest[package] = version
    return newest


def _version_key(version: str) -> tuple[tuple[int, str], ...]:
    """`0.19.8` < `0.19.10`; a part that is no number compares as text after the numbers."""
    return tuple((int(part), "") if part.isdigit() else (1 << 30, part) for part in version.split("."))


def newest_bundled_summary(package: str) -> tuple[str, str] | None:
    """(file name, TOML text) of the newest bundled release of `package`, or None."""
    version = bundled_releases().get(package)
    if version is None:
        return None
    text = _read(bundled_summary_name(package, version))
    return None if text is None else (bundled_summary_name(package, version), text)


def bundled_packages_imported(files: Iterable[Path]) -> set[str]:
    """The bundled packages the files import. Each file's bytes are searched once for
    `import NAME`/`from NAME` of a bundled package (a run importing none pays only that), and a
    file that matches has its imports read (`import_scan`)."""
    packages = bundled_releases()
    if not packages:
        return set()
    found: set[str] = set()
    for path in files:
        try:
            raw = read_regular_file(path, MAX_SOURCE_BYTES)
        except (OSError, FileRefused):
            continue
        if _mention().search(raw) is not None:
            found |= {name.split(".")[0] for name in imported_names(raw, None)} & packages.keys()
    return found


@cache
def _mention() -> re.Pattern[bytes]:
    alternatives = "|".join(re.escape(name) for name in sorted(bundled_releases())).encode()
    return re.compile(rb"(?:import|from)[ \t]+(?:" + alternatives + rb")\b")


def _read(name: str) -> str | None:
    try:
        raw = read_regular_file(BUNDLED_SUMMARIES / name, MAX_SUMMARY_BYTES)
    except (OSError, FileRefused):
        return None
    return raw.decode("utf-8", errors="replace")
