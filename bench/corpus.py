"""The real packages the benches run collcheck on: where they come from and how they are copied.

In: a `PackageSpec` (a requirement for `pip download --no-deps`, the installed torch, or a local
folder). Out: the unpacked package folder in the bench cache (`CACHE`, `~/.cache/collcheck-bench/
inject/`: wheels are zips, sdists tarballs; only `*.py` members with safe relative names are
written, none over `MAX_MEMBER_BYTES`; nothing third-party is imported or run here), and scratch
copies of a tree's `*.py` files. `PINNED_PACKAGES` are the packages at the versions the precision
ledger speaks of (bench/precision.py, budget_report.py, static_speed.py's `--corpus`).

The bottom of bench/: inject_bugs.py, precision.py, speed_corpora.py, static_speed.py and
budget_report.py import it, and it imports none of them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "collcheck-bench" / "inject"
MAX_MEMBER_BYTES = 4 * 1024 * 1024  # an archive member larger than this is not unpacked


@dataclass(frozen=True)
class PackageSpec:
    """A corpus: `requirement` is what `pip download` fetches (None: the installed torch, or a
    local folder given in `local`); `folder` is the import package analysed inside it."""

    name: str
    requirement: str | None
    folder: str
    local: Path | None = None


def installed_torch() -> Path:
    spec = importlib.util.find_spec("torch")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("torch is not installed here")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def safe_member(name: str) -> str | None:
    """The relative path an archive member may be written to, or None (absolute, `..`, not .py)."""
    parts = [part for part in name.replace("\\", "/").split("/") if part not in ("", ".")]
    if not parts or name.startswith("/") or ".." in parts or not parts[-1].endswith(".py"):
        return None
    return "/".join(parts)


def unpack(archive: Path, target: Path) -> int:
    """Write the archive's `*.py` members under `target`; the count written."""
    written = 0
    for name, read in archive_members(archive):
        relative = safe_member(name)
        if relative is None:
            continue
        data = read()
        if data is None:
            continue
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(data)
        written += 1
    return written


def archive_members(archive: Path) -> Iterator[tuple[str, Any]]:
    """(name, read) pairs of the regular members of a wheel/zip or a tarball; `read()` gives the
    bytes or None when the member is too large."""
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as wheel:
            for info in wheel.infolist():
                if not info.is_dir():
                    yield (
                        info.filename,
                        lambda info=info: wheel.read(info) if info.file_size <= MAX_MEMBER_BYTES else None,
                    )
        return
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.isfile():
                yield member.name, lambda member=member: _tar_read(tar, member)


def _tar_read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes | None:
    if member.size > MAX_MEMBER_BYTES:
        return None
    stream = tar.extractfile(member)
    return stream.read() if stream is not None else None


def locate_package(root: Path, folder: str) -> Path | None:
    """The shallowest folder named `folder` with Python files under root (megatron-core's
    `megatron/` is a namespace package: no `__init__.py`)."""
    found = sorted(
        (path for path in root.rglob(folder) if path.is_dir() and any(path.rglob("*.py"))),
        key=lambda path: len(path.parts),
    )
    return found[0] if found else None


def fetch(spec: PackageSpec, cache: Path) -> tuple[Path, str]:
    """The package folder to analyse and a description of where it came from."""
    if spec.local is not None:
        return spec.local.resolve(), f"local folder {spec.local}"
    if spec.requirement is None:
        return installed_torch(), "installed"
    unpacked = cache / "src" / spec.name
    if not (unpacked / ".complete").exists():
        download = cache / "download" / spec.name
        shutil.rmtree(download, ignore_errors=True)
        shutil.rmtree(unpacked, ignore_errors=True)
        download.mkdir(parents=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(download)]
        subprocess.run([*command, spec.requirement], check=True, timeout=900, capture_output=True)
        archives = sorted(download.iterdir())
        if len(archives) != 1:
            raise RuntimeError(f"{spec.name}: expected one downloaded file, got {archives}")
        unpacked.mkdir(parents=True)
        unpack(archives[0], unpacked)
        (unpacked / ".complete").write_text(archives[0].name, encoding="utf-8")
    package = locate_package(unpacked, spec.folder)
    if package is None:
        raise RuntimeError(f"{spec.name}: no {spec.folder}/ in the download")
    return package, (unpacked / ".complete").read_text(encoding="utf-8")


# Pinned: a ledger row speaks of one version's line. The 13 packages first analysed in issue 26, then
# the four trees the injection harness also uses (torch is the installed tree, as everywhere in bench/).
PINNED_PACKAGES: tuple[PackageSpec, ...] = (
    PackageSpec("vllm", "vllm==0.34.0", "vllm"),
    PackageSpec("sglang", "sglang==0.5.23", "sglang"),
    PackageSpec("colossalai", "colossalai==0.5.0", "colossalai"),
    PackageSpec("verl", "verl==0.9.1", "verl"),
    PackageSpec("torchrec", "torchrec==1.9.2", "torchrec"),
    PackageSpec("nemo", "nemo_toolkit==3.0.0", "nemo"),
    PackageSpec("composer", "mosaicml==0.32.1", "composer"),
    PackageSpec("fairscale", "fairscale==0.4.13", "fairscale"),
    PackageSpec("torchtune", "torchtune==0.6.1", "torchtune"),
    PackageSpec("openrlhf", "openrlhf==0.11.2", "openrlhf"),
    PackageSpec("torchtitan", "torchtitan==0.3.0", "torchtitan"),
    PackageSpec("megatron-core", "megatron-core==0.16.1", "megatron"),
    PackageSpec("deepspeed", "deepspeed==0.19.8", "deepspeed"),
    PackageSpec("torch", None, "torch"),
    PackageSpec("accelerate", "accelerate==1.15.0", "accelerate"),
    PackageSpec("pytorch-lightning", "pytorch-lightning==2.6.6", "pytorch_lightning"),
    PackageSpec("transformers", "transformers==5.23.0", "transformers"),
)


def copy_python_files(source: Path, target: Path) -> int:
    """The folder structure and its *.py files only (no .so, no __pycache__)."""

    def ignore(folder: str, names: list[str]) -> list[str]:
        return [
            name
            for name in names
            if name == "__pycache__"
            or (not name.endswith(".py") and not os.path.isdir(os.path.join(folder, name)))
        ]

    shutil.copytree(source, target, ignore=ignore, symlinks=True)
    return sum(1 for _ in python_files(target))


def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts and p.is_file())
