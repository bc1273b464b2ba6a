"""`collcheck summarize PACKAGE_OR_PATH`: a package's summary as a file a team can keep.

In: an installed package's name (found in `--python`'s environment, `$VIRTUAL_ENV`, the current
folder's `.venv`, else the site-packages of the interpreter running collcheck, read, never run) or
the path of a package folder or single-module file. Out: the summary of every module of the
package, as catalog TOML (or JSON), for `[tool.collcheck] summaries = [...]` where the package is
not installed beside the hook.
"""

from __future__ import annotations

import json
import os
import sysconfig
from pathlib import Path

from collcheck.config import ConfigError, Settings
from collcheck.environment import EnvironmentSource, find_environment
from collcheck.package_summaries import installed, installed_version, make_summary
from collcheck.summary_toml import dumps

MAX_PACKAGE_FILES = 5000  # every module of one package, listed without following links


def summarize(target: str, python: str | None, json_output: bool = False) -> str:
    site, package = _locate(target, python)
    modules = package_modules(site, package)
    document = make_summary(
        site, package, modules, Settings(), installed_version(site, package), len(modules) + 1
    )
    return json.dumps(document, indent=2) + "\n" if json_output else dumps(document)


def _locate(target: str, python: str | None) -> tuple[str, str]:
    """(site-packages folder, package name) of a path or of an installed package's name."""
    if os.sep in target or target.endswith(".py") or os.path.isdir(target):
        path = os.path.abspath(target.rstrip(os.sep))
        name = os.path.basename(path)
        package = name[:-3] if name.endswith(".py") else name
        if not os.path.exists(path) or not package.isidentifier():
            raise ConfigError(f"{target}: not a package folder or a .py module")
        return os.path.dirname(path), package
    if not all(part.isidentifier() for part in target.split(".")):
        raise ConfigError(f"{target!r} is neither a package name nor a path")
    package = target.split(".")[0]
    environment = find_environment(python, EnvironmentSource.NAMED, Path.cwd())
    sites = environment.site_packages if environment is not None else (sysconfig.get_paths()["purelib"],)
    for site in sites:
        if installed(site, package):
            return site, package
    raise ConfigError(f"package {package!r} is not installed in {', '.join(sites)} (pass --python)")


def package_modules(site: str, package: str) -> list[str]:
    """Every module of the package (its folder walked without following links), or the module."""
    folder = os.path.join(site, package)
    if not os.path.isdir(folder):
        return [package]
    modules: list[str] = []
    for current, folders, files in os.walk(folder):
        folders[:] = sorted(
            f for f in folders if f.isidentifier() and not os.path.islink(os.path.join(current, f))
        )
        relative = os.path.relpath(current, site).split(os.sep)
        for name in sorted(files):
            if name.endswith(".py") and name[:-3].isidentifier():
                parts = relative if name == "__init__.py" else [*relative, name[:-3]]
                modules.append(".".join(parts))
            if len(modules) >= MAX_PACKAGE_FILES:
                return modules
    return modules
