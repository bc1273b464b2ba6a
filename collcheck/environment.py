"""The Python environment whose installed packages the analysed code calls into (mypy/pyright style).

In: the `--python` option or `[tool.collcheck] python` (an interpreter path or an environment
folder), else `$VIRTUAL_ENV`, else a `.venv` folder beside the project. Out: an `Environment`
(its prefix and site-packages folders), or None when no environment is named or found.

The interpreter is never run: its site-packages folders are found from the environment's layout
(`pyvenv.cfg` next to or above the interpreter, `lib/pythonX.Y/site-packages`,
`Lib/site-packages`). A repository's own configuration may name any path, so nothing here executes,
imports or writes anything, and a site-packages folder reached through a link that leaves the
environment's prefix is refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from collcheck.config import ConfigError
from collcheck.source import FileRefused, read_regular_file

VENV_MARKER = "pyvenv.cfg"
# Compiled on use (`re` caches them): a check without an environment never needs them.
_VERSION = rb"^\s*version(?:_info)?\s*=\s*(\d+)\.(\d+)"
_LIB_PYTHON = r"python(\d+)\.(\d+)t?"


class EnvironmentSource(Enum):
    """Where the environment came from (shown by `-v` and in error messages)."""

    NAMED = "python"  # --python, or `python` in [tool.collcheck]
    VIRTUAL_ENV = "$VIRTUAL_ENV"
    PROJECT_VENV = ".venv beside the project"


@dataclass(frozen=True)
class Environment:
    prefix: str  # the environment's folder (the one holding pyvenv.cfg, or the interpreter's prefix)
    site_packages: tuple[str, ...]  # real paths, inside the prefix
    source: EnvironmentSource


def find_environment(
    python: str | None,
    source: EnvironmentSource,
    project_root: Path | None,
    environ: Mapping[str, str] | None = None,
    checked: Sequence[Path | str] = (),
) -> Environment | None:
    """The environment named by `python` (from `source`), else the active or the project's one.
    A named environment without a site-packages folder is a configuration error; a found one
    (`$VIRTUAL_ENV`, `.venv`) is just not used, nor one that holds every `checked` path (a check
    of an installed package's own files is not a check of the project around that environment)."""
    environ = os.environ if environ is None else environ
    if python:
        found = environment_at(python, source)
        if found is None:
            raise ConfigError(
                f"{source.value} = {python!r}: no site-packages folder found there "
                "(expected an interpreter inside a virtualenv, or the environment's folder)"
            )
        return found
    active = environ.get("VIRTUAL_ENV", "")
    if active and os.path.isabs(active) and not holds_all(active, checked):
        found = environment_at(active, EnvironmentSource.VIRTUAL_ENV)
        if found is not None:
            return found
    venv = project_root / ".venv" if project_root is not None else None
    if venv is not None and os.path.isfile(venv / VENV_MARKER) and not holds_all(str(venv), checked):
        return environment_at(str(venv), EnvironmentSource.PROJECT_VENV)
    return None


def holds_all(folder: str, paths: Sequence[Path | str]) -> bool:
    """Every one of `paths` (at least one) lies inside `folder`."""
    real = os.path.realpath(folder)
    return bool(paths) and all(_inside(os.path.realpath(path), real) for path in paths)


def environment_at(python: str, source: EnvironmentSource) -> Environment | None:
    """The environment of an interpreter path or an environment folder, from its layout alone.
    The interpreter path is not resolved (a venv's `bin/python` links to the base interpreter,
    whose prefix is another environment) and need not exist."""
    path = os.path.abspath(python)
    if os.path.isdir(path) and not os.path.islink(path):
        prefix = path
    else:
        folder = os.path.dirname(path)  # bin/ or Scripts/, or the prefix itself on Windows
        above = (folder, os.path.dirname(folder))
        marked = [p for p in above if os.path.isfile(os.path.join(p, VENV_MARKER))]
        prefix = marked[0] if marked else os.path.dirname(folder)
    folders = _site_packages(prefix)
    if not folders:
        return None
    return Environment(prefix=prefix, site_packages=folders, source=source)


def _site_packages(prefix: str) -> tuple[str, ...]:
    """`lib/pythonX.Y/site-packages` (the version of pyvenv.cfg first, then the newest), or
    `Lib/site-packages`; each kept only when its real path stays inside the prefix's."""
    wanted = _configured_version(prefix)
    candidates: list[tuple[tuple[int, int], str]] = []
    lib = os.path.join(prefix, "lib")
    try:
        names = os.listdir(lib) if os.path.isdir(lib) else []
    except OSError:
        names = []
    for name in names:
        matched = re.fullmatch(_LIB_PYTHON, name)
        if matched:
            version = (int(matched.group(1)), int(matched.group(2)))
            candidates.append((version, os.path.join(lib, name, "site-packages")))
    candidates.sort(key=lambda item: (item[0] != wanted, tuple(-n for n in item[0])))
    paths = [path for _, path in candidates]
    paths.append(os.path.join(prefix, "Lib", "site-packages"))
    real_prefix = os.path.realpath(prefix)
    kept: list[str] = []
    for path in paths:
        real = os.path.realpath(path)
        if os.path.isdir(real) and _inside(real, real_prefix) and real not in kept:
            kept.append(real)
    return tuple(kept[:1])  # one interpreter, one site-packages: the first by the rules above


def _configured_version(prefix: str) -> tuple[int, int] | None:
    try:
        raw = read_regular_file(os.path.join(prefix, VENV_MARKER), 64 * 1024)
    except (OSError, FileRefused):
        return None
    matched = re.search(_VERSION, raw, re.MULTILINE)
    return (int(matched.group(1)), int(matched.group(2))) if matched else None


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)
