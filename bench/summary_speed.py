"""What summaries of installed packages cost (docs/summaries.md).

python bench/summary_speed.py warm [--rounds 15] [--baseline CHECKOUT]
    A one-file check on a warm cache, plain, with `--python` naming a virtualenv that
    holds an in-house package (made under a temporary folder, like the tests'), of a file
    that imports four frameworks with bundled summaries (no environment: read from
    rules/summaries/), and of a file that imports torch only (`torch`; `torch-edited`: the same
    file edited before each run, so it is analysed and the catalogs, summaries included, are
    parsed: pre-commit's staged file), in interleaved rounds: wall and CPU milliseconds of each
    command (fresh processes). `--baseline`: every command also runs the collcheck of another
    checkout (its own cache), in the same rounds, for a before/after on one machine's load.
python bench/summary_speed.py cold PACKAGE_FOLDER...
    `collcheck summarize FOLDER` from scratch (a fresh user cache): wall and CPU seconds.
python bench/summary_speed.py download REQUIREMENT... --into DIR
    `pip download --no-deps` each pinned requirement (`deepspeed==0.19.8`) into DIR and unpack
    it (a wheel, or an sdist's tar.gz), printing the package folders to pass to `cold`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def _run(command: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float]:
    """Wall and CPU seconds of one command (its own CPU time, children included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _environment(cache: Path, checkout: Path = ROOT) -> dict[str, str]:
    env = dict(os.environ, XDG_CACHE_HOME=str(cache), PYTHONPATH=str(checkout))
    env.pop("VIRTUAL_ENV", None)
    return env


# A one-file check without an environment that imports four frameworks with bundled summaries
# (read from rules/summaries/ on every run); the same size of file as `train.py`'s.
FRAMEWORKS = """
import torch.distributed as dist
import deepspeed
from megatron.core import parallel_state
from transformers import Trainer
from accelerate import Accelerator


def step(tensor):
    if dist.get_rank() == 0:
        dist.barrier()  # expect: CC001
"""

# The common case: a file that imports torch and no other framework (the torch summary is read).
TORCH_ONLY = """
import torch
import torch.distributed as dist


def step(tensor):
    if dist.get_rank() == 0:
        dist.barrier()  # expect: CC001
"""


def warm(rounds: int, baseline: Path | None) -> None:
    from test_package_summaries import BUG, make_venv

    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        python = make_venv(base / "env")
        checkouts = {"": ROOT, **({"baseline ": baseline} if baseline is not None else {})}
        runs: dict[str, tuple[list[str], dict[str, str], Path, Path | None]] = {}
        for prefix, checkout in checkouts.items():
            project = base / f"project{len(runs)}"
            project.mkdir()
            (project / "train.py").write_text(BUG, encoding="utf-8")
            (project / "frameworks.py").write_text(FRAMEWORKS, encoding="utf-8")
            (project / "torch_only.py").write_text(TORCH_ONLY, encoding="utf-8")
            (project / "torch_edited.py").write_text(TORCH_ONLY, encoding="utf-8")
            env = _environment(base / f"cache{len(runs)}", checkout)
            check = [sys.executable, "-m", "collcheck", "check"]
            edited_file = project / "torch_edited.py"
            runs[f"{prefix}plain"] = ([*check, "train.py"], env, project, None)
            runs[f"{prefix}--python"] = ([*check, "train.py", "--python", str(python)], env, project, None)
            runs[f"{prefix}bundled"] = ([*check, "frameworks.py"], env, project, None)
            runs[f"{prefix}torch"] = ([*check, "torch_only.py"], env, project, None)
            runs[f"{prefix}torch-edited"] = ([*check, "torch_edited.py"], env, project, edited_file)
        for command, env, project, _ in runs.values():
            _run(command, env, project)  # fill the caches
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
        for round_number in range(rounds):
            for name, (command, env, project, edited) in runs.items():
                if edited is not None:  # a new result to compute: the file is analysed
                    edited.write_text(f"{TORCH_ONLY}# edit {round_number}\n", encoding="utf-8")
                times[name].append(_run(command, env, project))
        for name, measured in times.items():
            wall = statistics.median(w for w, _ in measured) * 1000
            cpu = statistics.median(c for _, c in measured) * 1000
            print(f"{name:>22}: median wall {wall:.1f} ms, median CPU {cpu:.1f} ms ({rounds} runs)")


def cold(folders: list[str]) -> None:
    for folder in folders:
        with tempfile.TemporaryDirectory() as cache:
            out = Path(cache) / "summary.toml"
            command = [sys.executable, "-m", "collcheck", "summarize", folder, "-o", str(out)]
            wall, cpu = _run(command, _environment(Path(cache)))
            text = out.read_text(encoding="utf-8") if out.exists() else ""
            ops, methods = text.count("\n[[op]]"), text.count("\n[[method]]")
            print(f"{folder}: {wall:.1f} s wall, {cpu:.1f} s CPU; {ops} [[op]], {methods} [[method]] entries")


def download(requirements: list[str], into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    for requirement in requirements:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary=:none:",
                requirement,
                "-d",
                str(into),
            ],
            check=True,
        )
    for archive in sorted(into.iterdir()):
        target = into / "unpacked" / archive.name
        if target.exists():
            continue
        if archive.suffix == ".whl":
            with zipfile.ZipFile(archive) as wheel:
                wheel.extractall(target)
        elif archive.name.endswith(".tar.gz"):
            with tarfile.open(archive) as sdist:
                sdist.extractall(target, filter="data")
    for init in sorted((into / "unpacked").glob("*/**/__init__.py")):
        parent = init.parent
        if not (parent.parent / "__init__.py").exists() and "test" not in parent.name:
            print(parent)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="mode", required=True)
    warm_parser = sub.add_parser("warm")
    warm_parser.add_argument("--rounds", type=int, default=15)
    warm_parser.add_argument("--baseline", type=Path, help="another checkout, measured alike")
    cold_parser = sub.add_parser("cold")
    cold_parser.add_argument("folders", nargs="+")
    download_parser = sub.add_parser("download")
    download_parser.add_argument("requirements", nargs="+")
    download_parser.add_argument("--into", type=Path, required=True)
    args = parser.parse_args()
    if args.mode == "warm":
        warm(args.rounds, args.baseline)
    elif args.mode == "cold":
        cold(args.folders)
    else:
        download(args.requirements, args.into)


if __name__ == "__main__":
    main()
