"""Summaries of the installed packages a run's files call into, from the user's cache or made now.

In: the run's paths and settings (`python`, `cache`, the catalogs), the project's root. Out: the
settings with `summary_documents` filled — one catalog document (TOML text) per installed package
that the analysed files import — which `catalog.settings_catalog` reads before the bundled
catalogs, so that `ourlib.sync()` is answered like a catalogued collective.

Which packages: the top-level names the files import (read off their text) that lie in the
environment's site-packages (`environment.find_environment`) as a folder or a single `.py` file,
are not the project's own, and are not named by a catalog (those have hand-written entries).
An editable install (a `.pth` file or an import hook pointing elsewhere) is not followed.

Each summary is stored in the user's cache folder, sealed with the user's secret
(`cache_guard.write_entry`), keyed by the package's name and version (its dist-info METADATA),
collcheck's version, the modules imported and the catalogs: a package is summarised once per
version. A package without a version is summarised on every run. A package built on another
installed package is summarised after it, with its summary (`make_summary`'s `uses`). Light on
purpose: a run with every summary cached imports neither the engine nor z3.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from collcheck import __version__
from collcheck.bundled_summaries import (
    bundled_summary,
    newest_bundled_summary,
    project_owns,
)
from collcheck.cache import engine_identity
from collcheck.cache_guard import read_entry, write_entry
from collcheck.catalog import catalog_fingerprint, catalogued_packages
from collcheck.config import Settings, user_cache_root
from collcheck.environment import Environment
from collcheck.import_scan import imported_names
from collcheck.source import MAX_SOURCE_BYTES, FileRefused, read_regular_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

SUMMARY_FORMAT = 1  # bump when what a summary holds changes
MAX_CHAIN = 3  # packages summarised for another's summary, one on top of the other
RUN_SECONDS = 300.0  # summarising packages from scratch in one run; the rest wait for a later run
MAX_IMPORT_SCAN_BYTES = MAX_SOURCE_BYTES
_METADATA_VERSION = rb"^Version:[ \t]*([^\s]+)"  # compiled on use: most runs never ask


def with_package_summaries(
    settings: Settings, environment: Environment, root: Path | None, files: Iterable[Path]
) -> Settings:
    """`settings` with the summaries of the installed packages `files` import."""
    modules = imported_modules(files)
    documents, skipped = summaries_for(environment, modules, settings, root)
    notes = (*skipped, *editable_notes(environment, modules, root))
    if not documents and not notes:
        return settings
    return replace(settings, summary_documents=documents, summary_notes=notes)


def summaries_for(
    environment: Environment, modules: set[str], settings: Settings, root: Path | None
) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """(name, catalog TOML text) of each installed package among `modules`: the bundled summary of
    its version if there is one, else (for a package no catalog describes) its own summary; and a
    note for each package left unsummarised because the run's budget for summarising is spent."""
    covered = catalogued_packages(tuple(settings.catalogs))
    by_package: dict[str, list[str]] = {}
    for module in sorted(modules):
        top = module.split(".")[0]
        if not project_owns(top, root):
            by_package.setdefault(top, []).append(module)
    documents: list[tuple[str, str]] = []
    notes: list[str] = []
    started = time.monotonic()
    for package in sorted(by_package):
        if not any(installed(site, package) for site in environment.site_packages):
            newest = newest_bundled_summary(package)  # not installed here: the newest pinned release
            if newest is not None:
                documents.append(newest)
    for site in environment.site_packages:
        for package, imported in sorted(by_package.items()):
            if not installed(site, package):
                continue
            version = installed_version(site, package)
            bundled = bundled_summary(package, version)
            if bundled is not None:
                documents.append(bundled)
                continue
            if package in covered:
                continue
            may_make = time.monotonic() - started < RUN_SECONDS
            text = package_summary(site, package, imported, settings, version, may_make)
            if text is None:
                notes.append(
                    f"{package}: not summarised, the run's {RUN_SECONDS:g} s for summaries are spent"
                )
            elif _has_entries(text):  # an empty one would only change the catalogs' fingerprint
                documents.append((f"{package}.summary.toml", text))
    return tuple(documents), tuple(notes)


def editable_notes(environment: Environment, modules: set[str], root: Path | None) -> tuple[str, ...]:
    """A note for each imported package that the environment installs in editable mode: no folder
    of it in site-packages, and a `.pth` file named after it (`__editable__.ourlib-1.0.pth`,
    `_ourlib.pth`, `ourlib.egg-link`). Its source lives elsewhere and is not read. One listing
    of site-packages, no file read: this runs on every check that uses an environment."""
    tops = {module.split(".")[0] for module in modules}
    notes: list[str] = []
    for site in environment.site_packages:
        try:
            entries = os.listdir(site)
        except OSError:
            continue
        linked = {_linked_name(entry) for entry in entries if entry.endswith((".pth", ".egg-link"))}
        for package in sorted(tops):
            if (
                _normalised(package) in linked
                and not installed(site, package)
                and not project_owns(package, root)
            ):
                notes.append(f"{package}: an editable install, not read (see docs/summaries.md)")
    return tuple(notes)


def _linked_name(entry: str) -> str:
    """`__editable__.our_lib-1.0.pth` -> `our_lib`."""
    stem = entry.rsplit(".", 1)[0].removeprefix("__editable__.").lstrip("_")
    return _normalised(stem.split("-", 1)[0])


def _has_entries(text: str) -> bool:
    """Whether a summary says anything beyond its `[catalog]` table (its tables' headers)."""
    return any(line.startswith("[") and not line.startswith("[catalog]") for line in text.splitlines())


def package_summary(
    site: str,
    package: str,
    modules: list[str],
    settings: Settings,
    version: str | None,
    may_make: bool = True,
    chain: tuple[str, ...] = (),
) -> str | None:
    """The summary of `package` as catalog TOML: from the user's cache, else (`may_make`) made and
    stored; None when it is not cached and may not be made. `chain`: the packages whose summaries
    are being made and need this one (`ourlib` calls `corelib`)."""
    key = _summary_key(package, version, modules, settings)
    folder = user_cache_root() / "summaries"
    target = folder / package / f"{key}.toml"
    # Kept across `--no-cache` (about per-file results): a package is summarised once per version.
    cached = version is not None
    if cached:
        text = read_entry(folder, target)
        if text is not None and _dependencies_unchanged(site, text):
            return text
    if not may_make:
        return None
    from collcheck.summary_toml import dumps

    document = make_summary(site, package, modules, settings, version, chain=chain)
    text = dumps(document)
    if cached and "unknown" not in document["catalog"].get("uses", {}).values():
        write_entry(folder, target, text)
    return text


def make_summary(
    site: str,
    package: str,
    modules: list[str],
    settings: Settings,
    version: str | None,
    max_files: int | None = None,
    chain: tuple[str, ...] = (),
    package_seconds: float | None = None,
    file_seconds: float | None = None,
) -> dict[str, Any]:
    """Summarise now (imports the engine): the catalog document, its `[catalog]` table saying
    what it summarises and the installed packages whose summaries it was made with (`uses`:
    `ourlib` built on an in-house `corelib`, bottom-up, at most `MAX_CHAIN` packages deep)."""
    from collcheck.catalog import load_catalog
    from collcheck.static.package_summaries import (
        FILE_SECONDS,
        MAX_FILES,
        PACKAGE_SECONDS,
        reached_files,
        summarise_package,
    )

    limit = max_files or MAX_FILES
    uses: dict[str, str] = {}
    documents: list[tuple[str, str]] = []
    if len(chain) < MAX_CHAIN:
        for other, imported in _other_packages(
            site, package, reached_files(site, package, modules, limit), settings
        ):
            if other in chain:
                continue
            other_version = installed_version(site, other)
            text = package_summary(site, other, imported, settings, other_version, True, (*chain, package))
            if text is not None and _has_entries(text):
                documents.append((f"{other}.summary.toml", text))
                uses[other] = other_version or "unknown"
    catalog = load_catalog((Path(p) for p in settings.catalogs), settings.summaries, documents)
    # What a package's code does for every caller: a gradient reduction assumed of models its files
    # do not show wrapped is the caller's assumption to make (where the caller's file runs backward).
    kept = tuple(s for s in catalog.gradient_syncs if not s.assumed)
    catalog = replace(catalog, gradient_syncs=kept, fingerprint=f"{catalog.fingerprint}+unwrapped")
    seconds = package_seconds or PACKAGE_SECONDS
    summary = summarise_package(
        site, package, modules, catalog, settings, limit, seconds, file_seconds or FILE_SECONDS
    )
    document = dict(summary.document)
    meta = dict(document.get("catalog", {}))
    meta["package"] = package
    meta["version"] = version or "unknown"
    meta["made_by"] = f"collcheck {__version__}"
    meta["files_read"] = summary.files_read
    if summary.notes:
        meta["notes"] = list(summary.notes)
    if uses:
        meta["uses"] = uses
    document["catalog"] = meta
    return document


def _other_packages(
    site: str, package: str, files: dict[str, tuple[str, frozenset[str]]], settings: Settings
) -> list[tuple[str, list[str]]]:
    """The other installed packages (no catalog describes them) that `package`'s files import, with
    the modules of each they import."""
    covered = catalogued_packages(tuple(settings.catalogs))
    wanted: dict[str, set[str]] = {}
    for _, imported in files.values():
        for name in imported:
            top = name.split(".")[0]
            if top != package and top not in covered:
                wanted.setdefault(top, set()).add(name)
    return [(top, sorted(names)) for top, names in sorted(wanted.items()) if installed(site, top)]


def _dependencies_unchanged(site: str, text: str) -> bool:
    """The packages a cached summary was made with are installed at the versions it records."""
    if "[catalog.uses]" not in text:
        return True
    try:
        uses = tomllib.loads(text).get("catalog", {}).get("uses", {})
    except tomllib.TOMLDecodeError:
        return False
    return isinstance(uses, dict) and all(
        installed_version(site, name) == version for name, version in uses.items()
    )


def _summary_key(package: str, version: str | None, modules: list[str], settings: Settings) -> str:
    catalogs = catalog_fingerprint(settings.catalogs, settings.summaries)
    material = "\0".join(
        [engine_identity(), str(SUMMARY_FORMAT), package, version or "", catalogs, *sorted(modules)]
    )
    return hashlib.sha256(material.encode("utf-8", "surrogateescape")).hexdigest()[:32]


# ----------------------------------------------------------------------------- what is installed


def imported_modules(files: Iterable[Path]) -> set[str]:
    """The dotted modules the files import (`from a.b import c` gives `a.b` and `a.b.c`), read off
    their text; relative imports are the project's own and are left out."""
    found: set[str] = set()
    for path in files:
        try:
            raw = read_regular_file(path, MAX_IMPORT_SCAN_BYTES)
        except (OSError, FileRefused):
            continue
        found |= imported_names(raw, None)
    return found


def installed(site: str, package: str) -> bool:
    """A package folder (a namespace package too: megatron-core's `megatron/`), or a single
    module file, that is not a link."""
    folder = os.path.join(site, package)
    if os.path.isdir(folder):
        return not os.path.islink(folder)
    single = folder + ".py"
    return os.path.isfile(single) and not os.path.islink(single)


def installed_version(site: str, package: str) -> str | None:
    """The version in the METADATA of the distribution that installs `package` (`_dist_info`)."""
    folder = _dist_info(site, package)
    return _metadata_version(folder) if folder is not None else None


def _dist_info(site: str, package: str) -> str | None:
    """The dist-info folder of the distribution that installs `package`: the one named like it,
    else the one whose top_level.txt (or RECORD) lists it."""
    try:
        entries = sorted(name for name in os.listdir(site) if name.endswith(".dist-info"))
    except OSError:
        return None
    wanted = _normalised(package)
    named = [e for e in entries if _normalised(e.split("-", 1)[0]) == wanted]
    if named:
        return os.path.join(site, named[0])
    for entry in entries:
        folder = os.path.join(site, entry)
        if _installs(folder, package):
            return folder
    return None


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _installs(folder: str, package: str) -> bool:
    """The distribution lists `package` in its top_level.txt or, lacking one, installs files of it
    (the first lines of its RECORD)."""
    try:
        raw = read_regular_file(os.path.join(folder, "top_level.txt"), 64 * 1024, follow_links=False)
        return package in raw.decode(errors="replace").split()
    except (OSError, FileRefused):
        pass
    try:
        record = read_regular_file(os.path.join(folder, "RECORD"), 16 * 1024 * 1024, follow_links=False)
    except (OSError, FileRefused):
        return False
    head = record[:65536].decode(errors="replace").splitlines()
    return any(line.startswith((f"{package}/", f"{package}.py,")) for line in head)


def _metadata_version(folder: str) -> str | None:
    try:
        raw = read_regular_file(os.path.join(folder, "METADATA"), 4 * 1024 * 1024, follow_links=False)
    except (OSError, FileRefused):
        return None
    matched = re.search(_METADATA_VERSION, raw[:65536], re.MULTILINE)
    if matched is None:
        return None
    version = matched.group(1).decode(errors="replace")
    # It names cache entries and bundled files: a version that is no version (`../x`) is none.
    return version if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63}", version) else None
