"""Regenerate the bundled summaries, `rules/summaries/PACKAGE-VERSION.toml`, from pinned releases.

    python bench/bundled_summaries.py [--into /tmp/collcheck-wheels] [--packages accelerate,verl]

For each pin below (or those named): `pip download --no-deps` the release (a wheel, or the sdist
when there is no wheel for this platform), unpack its `.py` files under `--into`, summarise every
module of the package (`collcheck summarize`'s work; nothing is imported or run) and write the
summary, with the time it took. A run uses the bundled summary of the installed version, or the
newest bundled one when the package is not installed (docs/summaries.md). To follow a new release,
change its pin and run this once. Only facts are committed (names, ops, parameters), no code of
the packages. `pip download` of a release with only an sdist (deepspeed) prepares its metadata
with the package's build backend: run this in a throwaway environment.

torch is pinned too, but read from the site-packages of the interpreter that runs this script
instead of downloaded (its wheel is 800 MB of which the `.py` files are a small part, and its CPU
and CUDA builds share them): install the pinned release there (`2.13.0+cpu` is `2.13.0`) and run
`python bench/bundled_summaries.py --packages torch`; another installed version is refused.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collcheck.bundled_summaries import BUNDLED_SUMMARIES, bundled_summary_name  # noqa: E402
from collcheck.config import Settings  # noqa: E402
from collcheck.package_summaries import installed_version, make_summary  # noqa: E402
from collcheck.summarize import package_modules  # noqa: E402
from collcheck.summary_toml import dumps  # noqa: E402

# distribution, version, top-level package
PINS = (
    ("deepspeed", "0.19.8", "deepspeed"),
    ("megatron-core", "0.16.1", "megatron"),
    ("accelerate", "1.15.0", "accelerate"),
    ("transformers", "5.23.0", "transformers"),
    ("lightning", "2.6.6", "lightning"),
    ("pytorch-lightning", "2.6.6", "pytorch_lightning"),
    ("torchmetrics", "1.9.0", "torchmetrics"),
    ("torchtitan", "0.3.0", "torchtitan"),
    ("verl", "0.9.1", "verl"),
    ("vllm", "0.34.0", "vllm"),
    ("sglang", "0.5.23", "sglang"),
    ("torch", "2.13.0", "torch"),
)
# Read from the installed tree rather than downloaded (the docstring says why).
FROM_INSTALLED = frozenset({"torch"})
# Modules no user code calls into: torch's own test suites and their helpers (thousands of test
# methods that would be most of its summary, and a third of the time to make it).
LEFT_OUT = {"torch": ("torch.testing._internal",)}
# Generous: a bundled summary is made once per release, and a package cut short is a worse summary.
PACKAGE_SECONDS = 1800.0
# Per file too: the run's 10 s wall-clock budget a file made a summary depend on the machine's load
# (a large module, deepspeed's zero/stage3, summarised in part under load and whole when idle).
FILE_SECONDS = 300.0


def fetch(distribution: str, version: str, into: Path) -> Path:
    """The folder that holds the unpacked package's `.py` files (a site-packages-like root)."""
    target = into / f"{distribution}-{version}"
    if not target.exists():
        download = into / "downloads"
        if not _archives(download, distribution, version):  # downloaded once, kept under --into
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    f"{distribution}=={version}",
                    "-d",
                    str(download),
                ],
                check=True,
            )
        _unpack(_archives(download, distribution, version)[0], target)
    children = list(target.iterdir())
    return children[0] if len(children) == 1 and children[0].is_dir() and "-" in children[0].name else target


def installed_site(distribution: str, version: str, package: str) -> Path:
    """The site-packages of this interpreter, when it installs the pinned release of `package`
    (a local label, `+cpu`, aside)."""
    site = sysconfig.get_paths()["purelib"]
    found = installed_version(site, package)
    if found is None or found.partition("+")[0] != version:
        raise SystemExit(f"{distribution} {version} is pinned, {found or 'none'} is installed in {site}")
    return Path(site)


def _archives(download: Path, distribution: str, version: str) -> list[Path]:
    normalised = distribution.replace("-", "_").lower()
    if not download.is_dir():
        return []
    return sorted(
        a
        for a in download.iterdir()
        if a.name.lower().replace("-", "_").startswith(f"{normalised}_{version}")
    )


def _unpack(archive: Path, target: Path) -> None:
    """Only the `.py` members with plain relative names (a wheel of compiled code is mostly not)."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            for name in wheel.namelist():
                if _plain_source(name):
                    wheel.extract(name, target)
        return
    with tarfile.open(archive) as sdist:
        members = [m for m in sdist.getmembers() if m.isfile() and _plain_source(m.name)]
        sdist.extractall(target, members=members, filter="data")


def _plain_source(name: str) -> bool:
    path = PurePosixPath(name)
    return name.endswith(".py") and not path.is_absolute() and ".." not in path.parts


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--into", type=Path, default=Path("/tmp/collcheck-wheels"))
    parser.add_argument("--packages", default="", help="comma-separated distributions (default: all pins)")
    args = parser.parse_args()
    wanted = {name for name in args.packages.split(",") if name}
    BUNDLED_SUMMARIES.mkdir(parents=True, exist_ok=True)
    for distribution, version, package in PINS:
        if wanted and distribution not in wanted:
            continue
        if distribution in FROM_INSTALLED:
            site = installed_site(distribution, version, package)
        else:
            site = fetch(distribution, version, args.into)
        left_out = LEFT_OUT.get(distribution, ())
        modules = [m for m in package_modules(str(site), package) if not any(_within(m, p) for p in left_out)]
        started, cpu = time.monotonic(), time.process_time()
        document = make_summary(
            str(site),
            package,
            modules,
            Settings(),
            version,
            len(modules) + 1,
            package_seconds=PACKAGE_SECONDS,
            file_seconds=FILE_SECONDS,
        )
        wall, cpu = time.monotonic() - started, time.process_time() - cpu
        for old in BUNDLED_SUMMARIES.glob(bundled_summary_name(package, "*")):
            old.unlink()  # one release of a package is bundled: the pin's
        target = BUNDLED_SUMMARIES / bundled_summary_name(package, version)
        target.write_text(dumps(document), encoding="utf-8")
        size = target.stat().st_size
        timing = f"{wall:.1f} s wall, {cpu:.1f} s CPU"
        print(f"{distribution} {version}: {len(modules)} modules, {timing}, {size} bytes")


if __name__ == "__main__":
    main()
