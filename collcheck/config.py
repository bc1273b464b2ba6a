"""Settings: `[tool.collcheck]` in pyproject.toml, overridden by the command line.

Settings are immutable and passed into the engine; no check reads configuration from globals.
Where a pyproject may put the cache (`check_configured_cache_dir`: inside the project or the
user's cache folder) is checked here, as the pyproject is read; collcheck.cache_guard guards the
folder when it is used.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from collcheck.source import MAX_CONFIG_BYTES, FileRefused, read_regular_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_EXCLUDE: tuple[str, ...] = (
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".env",
    "env",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".collcheck_cache",
    "__pycache__",
    "build",
    "dist",
    "node_modules",
    "site-packages",
)


MAX_FILE_TIMEOUT = 86_400.0  # a day: beyond it a per-file budget means nothing


class ConfigError(ValueError):
    """A configuration problem; the CLI reports it and exits with code 2."""


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] = ()  # empty: every rule enabled by default
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    world_size: int | None = None
    catalogs: tuple[str, ...] = ()
    z3_timeout_ms: int = 2000
    max_paths: int = 256
    max_inline_depth: int = 4
    max_steps: int = 5000  # statements executed per analysed function, helpers included
    jobs: int = 0  # 0: all cores; never more than the cores this process may use
    file_timeout: float = 10.0  # wall-clock seconds per analysed file; 0: no limit
    cache: bool = True
    cache_dir: str = ".collcheck_cache"
    respect_gitignore: bool = True
    # Checking some files of a project (pre-commit): index the whole project around them, so that
    # helpers and constants of files outside the run are followed as in a whole-tree run.
    project_context: bool = True
    memory: tuple[tuple[str, Any], ...] = ()
    root: str = "."  # folder holding the pyproject.toml the settings came from
    baseline: str | None = None  # report only findings not recorded in it (collcheck.adopt.baseline)

    def memory_settings(self) -> dict[str, Any]:
        return dict(self.memory)

    def with_overrides(self, **changes: Any) -> Settings:
        return replace(self, **{key: value for key, value in changes.items() if value is not None})


_KEY_TYPES: dict[str, str] = {
    "select": "codes",
    "ignore": "codes",
    "extend-select": "codes",
    "per-file-ignores": "per-file",
    "exclude": "strings",
    "extend-exclude": "strings",
    "world-size": "int",
    "catalogs": "strings",
    "z3-timeout": "int",
    "max-paths": "int",
    "max-inline-depth": "int",
    "max-steps": "int",
    "jobs": "int",
    "file-timeout": "seconds",
    "cache": "bool",
    "cache-dir": "string",
    "respect-gitignore": "bool",
    "project-context": "bool",
    "memory": "table",
    "baseline": "string",
}


def _check_type(key: str, value: Any) -> Any:
    expected = _KEY_TYPES[key]
    if expected in ("codes", "strings"):
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ConfigError(f"[tool.collcheck] '{key}' must be a list of strings")
        if expected == "codes":
            return tuple(code.strip().upper() for code in value if code.strip())
        return tuple(value)
    if expected == "int":
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"[tool.collcheck] '{key}' must be a non-negative integer")
        return value
    if expected == "seconds":
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not 0 <= value <= MAX_FILE_TIMEOUT:  # NaN fails the comparison too
            raise ConfigError(f"[tool.collcheck] '{key}' must be from 0 to {MAX_FILE_TIMEOUT:g} seconds")
        return float(value)
    if expected == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"[tool.collcheck] '{key}' must be true or false")
        return value
    if expected == "string":
        if not isinstance(value, str):
            raise ConfigError(f"[tool.collcheck] '{key}' must be a string")
        return value
    if expected == "table":
        if not isinstance(value, dict):
            raise ConfigError(f"[tool.collcheck] '{key}' must be a table")
        return tuple(sorted(value.items()))
    # per-file-ignores: {"glob" = ["CC001"]}
    if not isinstance(value, dict):
        raise ConfigError(f"[tool.collcheck] '{key}' must be a table of glob = [codes]")
    pairs = []
    for pattern, codes in value.items():
        if isinstance(codes, str):
            codes = [codes]
        if not isinstance(codes, list) or not all(isinstance(code, str) for code in codes):
            raise ConfigError(f"[tool.collcheck] '{key}.{pattern}' must be a list of codes")
        pairs.append((pattern, tuple(code.upper() for code in codes)))
    return tuple(pairs)


def user_cache_root() -> Path:
    """The user's own cache folder for collcheck (XDG base directory rules)."""
    configured = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(configured) if os.path.isabs(configured) else Path.home() / ".cache"
    return base / "collcheck"


def _inside(path: Path, folder: Path) -> bool:
    try:
        Path(os.path.normpath(path)).relative_to(os.path.normpath(folder))
    except ValueError:
        return False
    return True


def check_configured_cache_dir(value: str, root: Path) -> str:
    """`cache-dir` as a pyproject may set it: inside the project or the user's cache folder."""
    folder = Path(value) if os.path.isabs(value) else root / value
    if _inside(root, folder):
        # The project itself, or a folder above it: the cache's `.gitignore` (`*`) would hide the
        # whole project from git, and its entries would be written among the project's files.
        raise ConfigError(
            f"[tool.collcheck] 'cache-dir' = {value!r} is the project folder ({root}) or a folder "
            "above it; give the cache a folder of its own"
        )
    if _inside(folder, root) or _inside(folder, user_cache_root()):
        return value
    raise ConfigError(
        f"[tool.collcheck] 'cache-dir' = {value!r} is outside the project ({root}) and outside the "
        f"user's cache folder ({user_cache_root()}); collcheck writes only inside those"
    )


def settings_from_table(table: Mapping[str, Any], root: Path) -> Settings:
    values: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = raw_key.replace("_", "-")
        if key not in _KEY_TYPES:
            known = ", ".join(sorted(_KEY_TYPES))
            raise ConfigError(f"[tool.collcheck] unknown key '{raw_key}' (known keys: {known})")
        values[key.replace("-", "_")] = _check_type(key, value)
    if "z3_timeout" in values:
        values["z3_timeout_ms"] = values.pop("z3_timeout")
    if values.get("world_size") is not None and values["world_size"] < 2:
        raise ConfigError("[tool.collcheck] 'world-size' must be at least 2")
    if "catalogs" in values:
        values["catalogs"] = tuple(os.path.realpath(root / path) for path in values["catalogs"])
    if "cache_dir" in values:
        values["cache_dir"] = check_configured_cache_dir(values["cache_dir"], root)
    if "baseline" in values:
        values["baseline"] = os.path.realpath(root / values["baseline"])
    return Settings(root=str(root), **values)


def find_pyproject(paths: Iterable[Path]) -> Path | None:
    """The nearest pyproject.toml with a [tool.collcheck] table, from the first path upward."""
    starts = [Path(os.path.realpath(path)) for path in paths] or [Path.cwd()]
    for start in starts:
        folder = start if start.is_dir() else start.parent
        for candidate_dir in [folder, *folder.parents]:
            candidate = candidate_dir / "pyproject.toml"
            if candidate.is_file() and _has_collcheck_table(candidate):
                return candidate
    return None


def _has_collcheck_table(path: Path) -> bool:
    try:
        return b"[tool.collcheck" in read_regular_file(path, MAX_CONFIG_BYTES)
    except (OSError, FileRefused):
        return False


def load_settings(paths: Iterable[Path] = (), config_file: Path | None = None) -> Settings:
    pyproject = config_file or find_pyproject(paths)
    if pyproject is None:
        return Settings()
    try:
        data = tomllib.loads(read_regular_file(pyproject, MAX_CONFIG_BYTES).decode("utf-8"))
    except (OSError, UnicodeDecodeError, FileRefused) as error:
        raise ConfigError(f"cannot read {pyproject}: {error}") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{pyproject} is not valid TOML: {error}") from error
    table = data.get("tool", {}).get("collcheck", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{pyproject}: [tool.collcheck] must be a table")
    return settings_from_table(table, pyproject.parent)


@dataclass(frozen=True)
class RuleSelection:
    """Which codes are reported, ruff-style: select/extend-select minus ignore, by prefix."""

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    default_enabled: frozenset[str] = field(default_factory=frozenset)

    def enabled(self, code: str) -> bool:
        if any(code.startswith(prefix) for prefix in self.ignore):
            return False
        if self.select:
            return any(code.startswith(prefix) for prefix in self.select)
        return code in self.default_enabled
