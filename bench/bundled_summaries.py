"""Regenerate the bundled summaries, `rules/summaries/PACKAGE-VERSION.toml`, from pinned releases.

    python bench/bundled_summaries.py [--into /tmp/collcheck-wheels]

For each pin below: `pip download --no-deps` the release (a wheel, or the sdist when there is no
wheel for this platform), unpack it under `--into`, summarise every module of the package
(`collcheck summarize`'s work; nothing is imported or run) and write the summary, with the time
it took. A run with an environment where that exact version is installed uses the bundled summary
instead of summarising (also for packages a catalog describes, whose source is otherwise not read).
Only facts are committed (names, ops, parameters), no code of the packages.
`pip download` of a release with only an sdist (deepspeed) prepares its metadata with the package's
build backend: run this in a throwaway environment.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collcheck.config import Settings  # noqa: E402
from collcheck.package_summaries import BUNDLED_SUMMARIES, bundled_summary_name, make_summary  # noqa: E402
from collcheck.summarize import package_modules  # noqa: E402
from collcheck.summary_toml import dumps  # noqa: E402

# distribution, version, top-level package
PINS = (
    ("deepspeed", "0.19.8", "deepspeed"),
    ("megatron-core", "0.16.1", "megatron"),
)


def fetch(distribution: str, version: str, into: Path) -> Path:
    """The folder that holds the unpacked package (the site-packages-like root)."""
    target = into / f"{distribution}-{version}"
    if not target.exists():
        download = into / "downloads"
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
        normalised = distribution.replace("-", "_").lower()
        archives = [
            a
            for a in download.iterdir()
            if a.name.lower().replace("-", "_").startswith(f"{normalised}_{version}")
        ]
        archive = archives[0]
        if archive.suffix == ".whl":
            with zipfile.ZipFile(archive) as wheel:
                wheel.extractall(target)
        else:
            with tarfile.open(archive) as sdist:
                sdist.extractall(target, filter="data")
            (inner,) = list(target.iterdir())  # an sdist holds one folder, `name-version/`
            return inner
    children = list(target.iterdir())
    return children[0] if len(children) == 1 and children[0].is_dir() and "-" in children[0].name else target


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--into", type=Path, default=Path("/tmp/collcheck-wheels"))
    args = parser.parse_args()
    BUNDLED_SUMMARIES.mkdir(parents=True, exist_ok=True)
    for distribution, version, package in PINS:
        site = fetch(distribution, version, args.into)
        modules = package_modules(str(site), package)
        started = time.process_time()
        document = make_summary(str(site), package, modules, Settings(), version, len(modules) + 1)
        seconds = time.process_time() - started
        target = BUNDLED_SUMMARIES / bundled_summary_name(package, version)
        target.write_text(dumps(document), encoding="utf-8")
        print(f"{distribution} {version}: {len(modules)} modules, {seconds:.1f} s CPU -> {target}")


if __name__ == "__main__":
    main()
