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
from enum import Enum
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


class ConfigError(ValueError):
    """A configuration problem; the CLI reports it and exits with code 2."""


class BudgetPolicy(str, Enum):
    """What a function cut short by a work budget does to the exit code (`budget-exceeded`)."""

    NOTE = "note"  # reported as a note; the exit code is the findings' and errors' alone
    ERROR = "error"  # fails the run like a finding


# The largest value a repository's `[tool.collcheck]` may give each bound, about ten times its
# default: the configuration comes with the code being checked (a pull request can change it), so
# it may tune the bounds but never lift them; above a cap is a configuration error (exit 2). The
# command line is the invoker's own: it may go further (COMMAND_LINE_MAX_FILE_TIMEOUT).
CAPS: dict[str, float] = {
    "max-steps": 100_000,
    "max-paths": 4_096,
    "max-inline-depth": 16,
    "z3-rlimit": 20_000_000,
    "z3-function-rlimit": 300_000_000,
    "file-timeout": 1_000.0,
}
# The smallest value of a bound, where it is not 1: 0 helpers deep is a choice (follow none), not
# an absence of bound.
_LEAST = {"max-inline-depth": 0}
COMMAND_LINE_MAX_FILE_TIMEOUT = 86_400.0  # --file-timeout: a day, or 0 for no clock at all


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
    # Work budgets: they count work, not time, so a file's result is the same on every machine.
    max_paths: int = 256
    max_inline_depth: int = 4
    max_steps: int = 5000  # statements executed per analysed function, helpers included
    z3_rlimit: int = 2_000_000  # z3 resource units per solver query
    z3_function_rlimit: int = 30_000_000  # z3 resource units for all the queries of one function
    budget_exceeded: BudgetPolicy = BudgetPolicy.NOTE
    jobs: int = 0  # 0: all cores; never more than the cores this process may use
    # The safety clock: wall-clock seconds per analysed file, about ten times what the slowest
    # file of the measured corpora takes; a file past it is an error. 0 (command line only): none.
    file_timeout: float = 100.0
    cache: bool = True
    cache_dir: str = ".collcheck_cache"
    respect_gitignore: bool = True
    # Checking some files of a project (pre-commit): index the whole project around them, so that
    # helpers and constants of files outside the run are followed as in a whole-tree run.
    project_context: bool = True
    memory: tuple[tuple[str, Any], ...] = ()
    root: str = "."  # folder holding the pyproject.toml the settings came from
    baseline: str | None = None  # report only findings not recorded in it (collcheck.adopt.baseline)
    # The environment whose installed packages are summarised (collcheck.environment): an
    # interpreter path or an environment folder; None: $VIRTUAL_ENV, else the project's .venv.
    python: str | None = None
    summaries: tuple[str, ...] = ()  # summary files (`collcheck summarize`), read like catalogs
    # Summaries of the environment's packages for this run, (package, catalog TOML text): filled
    # by `package_summaries.with_package_summaries`, never by a configuration.
    summary_documents: tuple[tuple[str, str], ...] = ()
    summary_notes: tuple[str, ...] = ()  # installed packages imported but not read (editable installs)
    # Every rank reads one shared filesystem (NFS, Lustre, a cloud bucket mount): what it holds is
    # then no per-process value (catalog category `FILESYSTEM_STATE`), as the user states here.
    shared_filesystem: bool = False
    # A backward in a file that trains under torch.distributed is taken as a possible gradient
    # reduction even where the model's wrapping (DDP, FSDP) is not visible; false: the user
    # states that the models such files train are not wrapped.
    assume_wrapped_models: bool = True

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
    "z3-rlimit": "bound",
    "z3-function-rlimit": "bound",
    "max-paths": "bound",
    "max-inline-depth": "bound",
    "max-steps": "bound",
    "budget-exceeded": "policy",
    "jobs": "int",
    "file-timeout": "seconds",
    "cache": "bool",
    "cache-dir": "string",
    "respect-gitignore": "bool",
    "project-context": "bool",
    "memory": "table",
    "baseline": "string",
    "python": "string",
    "summaries": "strings",
    "shared-filesystem": "bool",
    "assume-wrapped-models": "bool",
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
    if expected == "bound":
        cap, least = int(CAPS[key]), _LEAST.get(key, 1)
        if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= cap:
            raise ConfigError(
                f"[tool.collcheck] '{key}' must be an integer from {least} to {cap:,} (the cap a "
                f"repository's configuration may set; got {value!r})"
            )
        return value
    if expected == "seconds":
        seconds = CAPS[key]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not 0 < value <= seconds:  # NaN fails the comparison too
            raise ConfigError(
                f"[tool.collcheck] '{key}' must be more than 0 and at most {seconds:g} seconds (the cap a "
                f"repository's configuration may set; got {value!r})"
            )
        return float(value)
    if expected == "policy":
        choices = ", ".join(f'"{policy.value}"' for policy in BudgetPolicy)
        if not isinstance(value, str) or value not in {policy.value for policy in BudgetPolicy}:
            raise ConfigError(f"[tool.collcheck] '{key}' must be one of {choices}")
        return BudgetPolicy(value)
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


# Keys that bounded time and are gone: a configuration naming one says what replaced it.
_REPLACED_KEYS = {
    "z3-timeout": "solver queries are bounded by 'z3-rlimit' (z3 resource units per query) and "
    "'z3-function-rlimit' (per function), which count work and give the same result on every machine",
}


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
        if key in _REPLACED_KEYS:
            raise ConfigError(f"[tool.collcheck] '{raw_key}' is no longer read: {_REPLACED_KEYS[key]}")
        if key not in _KEY_TYPES:
            known = ", ".join(sorted(_KEY_TYPES))
            raise ConfigError(f"[tool.collcheck] unknown key '{raw_key}' (known keys: {known})")
        values[key.replace("-", "_")] = _check_type(key, value)
    if values.get("world_size") is not None and values["world_size"] < 2:
        raise ConfigError("[tool.collcheck] 'world-size' must be at least 2")
    if "catalogs" in values:
        values["catalogs"] = tuple(os.path.realpath(root / path) for path in values["catalogs"])
    if "cache_dir" in values:
        values["cache_dir"] = check_configured_cache_dir(values["cache_dir"], root)
    if "summaries" in values:
        values["summaries"] = tuple(os.path.realpath(root / path) for path in values["summaries"])
    if "python" in values:  # not resolved: a venv's interpreter is a link out of the venv
        values["python"] = os.path.join(root, values["python"])
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
