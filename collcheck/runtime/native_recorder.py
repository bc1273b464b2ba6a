"""Build, load and drive the native recorder (native/recorder.cpp), the C++ kernel of record mode and
async verify.

The Python kernel of hook.py costs each collective a round trip through Python; the native kernel
writes the same trace line from C++ and enters Python only to walk the caller's frames (and, once
per new group, code object, call site or thread, to ask this module). It is compiled once per
torch/Python/source combination with `torch.utils.cpp_extension` (about a minute on two cores),
in a subprocess with a timeout, under an advisory file lock so that the ranks of a job build it
once between them; a lock held by a killed process is released by the kernel, so it never goes
stale. Without a compiler, or with COLLCHECK_NATIVE=0, record mode keeps the Python kernel.
Loading a library runs its code, so one is loaded (or built) only where no other user could have
put it: the library, its folder and the cache root must be owned by this user and not writable by
group or others (`untrusted`); otherwise the Python kernel is used, after one warning.

    python -m collcheck.runtime.native build     # build now (what `collcheck run` does first)

(The module sat beside the folder native/ as native.py; the command above keeps that name through
native/__main__.py, so the README's instructions and existing container images keep working.)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import stat
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import CodeType, ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collcheck.runtime.record import CollectiveEncoder

SOURCE = Path(__file__).resolve().parent / "native" / "recorder.cpp"
# Included by SOURCE: part of what a build is of.
HEADERS = tuple(
    SOURCE.parent / name for name in ("binary_trace.h", "binary_trace_py.h", "recorder_python_side.h")
)
ENV_NATIVE_DIR = "COLLCHECK_NATIVE_DIR"  # where builds live (default: the user's cache folder)
BUILD_TIMEOUT_S = 900.0
LOCK_TIMEOUT_S = BUILD_TIMEOUT_S + 60.0
FAILED_MARKER = "build-failed.txt"


def cache_root(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get(ENV_NATIVE_DIR):
        return Path(env[ENV_NATIVE_DIR])
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "collcheck" / "native"


def module_name() -> str:
    """Unique per source text, torch build and interpreter: a stale build is never loaded. The
    torch version comes from its metadata, so the launcher can tell whether a build exists
    without importing torch (and from torch itself where it has none: a source checkout)."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        import torch

        version = str(torch.__version__)
    digest = hashlib.sha256()
    for source in (SOURCE, *HEADERS):
        digest.update(source.read_bytes())
    for part in (version, sys.version, str(sysconfig.get_config_var("EXT_SUFFIX"))):
        digest.update(part.encode())
    return f"collcheck_native_{digest.hexdigest()[:16]}"


def is_built() -> bool:
    """Whether this interpreter's build exists (without importing torch)."""
    if importlib.util.find_spec("torch") is None:
        return False
    try:
        name = module_name()
    except Exception:  # torch without metadata that cannot be imported either
        return False
    return (cache_root() / name / f"{name}.so").is_file()


_loaded: ModuleType | None = None
_load_lock = threading.Lock()


def untrusted(path: Path) -> str | None:
    """Why another user could have written `path`, or None: it must be owned by this user and not
    writable by group or others. A file must not be a link; a folder is checked where it leads."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        if not path.is_dir():
            return f"{path} is a symbolic link"
        info = os.stat(path)
    if info.st_uid != os.geteuid():
        return f"{path} is owned by uid {info.st_uid}, not by this user"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by group or others"
    return None


def _untrusted_build(directory: Path) -> str | None:
    """Why the build in `directory` must not be loaded or made, or None (also when absent)."""
    library = directory / f"{directory.name}.so"
    for path in (directory.parent, directory, library):
        if os.path.lexists(path):
            why = untrusted(path)
            if why is not None:
                return why
    return None


def _make_private(directory: Path) -> None:
    """Create the cache root and build folder for this user only (umask aside)."""
    for path in (directory.parent, directory):
        if not path.exists():
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            path.chmod(0o700)


_warned_untrusted = False


def _refuse_untrusted(why: str) -> None:
    global _warned_untrusted
    if not _warned_untrusted:
        _warned_untrusted = True
        warn(
            f"native recorder not loaded: {why} (another user could have planted it); using the Python kernel"
        )


def load(build: bool = True, quiet: bool = False) -> ModuleType | None:
    """The compiled recorder, building it first if needed (and allowed); None if unavailable."""
    global _loaded
    with _load_lock:
        if _loaded is not None:
            return _loaded
        try:
            name = module_name()
            directory = cache_root() / name
            if build:
                _make_private(directory)
            why = _untrusted_build(directory)
            if why is not None:
                _refuse_untrusted(why)
                return None
            _loaded = _import(name, directory) or (
                _build_and_import(name, directory, quiet) if build else None
            )
        except Exception as error:  # never fail the traced program for it
            warn(f"native recorder unavailable ({type(error).__name__}: {error}); using the Python kernel")
            return None
        return _loaded


def _import(name: str, directory: Path) -> ModuleType | None:
    library = directory / f"{name}.so"
    if not library.is_file():
        return None
    why = _untrusted_build(directory)  # again: a build just made, or one that appeared meanwhile
    if why is not None:
        _refuse_untrusted(why)
        return None
    import torch  # noqa: F401  (the extension links against torch's libraries, loaded first)

    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build_and_import(name: str, directory: Path, quiet: bool) -> ModuleType | None:
    failed = directory / FAILED_MARKER
    with _exclusive(directory / "collcheck.lock") as lock:
        module = _import(name, directory)  # another rank built it while we waited
        if module is not None:
            return module
        if failed.exists():
            warn(f"native recorder: an earlier build failed (see {failed}; delete it to retry)")
            return None
        if not quiet:
            warn(f"building the native recorder once for this torch (about a minute) in {directory}")
        started = time.monotonic()
        discard_interrupted_build(directory)
        done = _run_build(name, directory, lock)
        if interrupted(done):
            warn("native recorder: the build was interrupted; the next run builds it again")
            return None
        if done.returncode != 0:
            from collcheck.safe_write import WriteRefused, replace_below

            with contextlib.suppress(OSError, WriteRefused):
                replace_below(directory, failed, (done.stdout + done.stderr).encode("utf-8", "replace"))
            warn(f"native recorder: build failed (see {failed}); using the Python kernel")
            return None
        if not quiet:
            warn(f"native recorder built in {time.monotonic() - started:.0f} s")
        return _import(name, directory)


def build_in_background() -> str:
    """Start a detached build for later runs (the tracer of this one keeps the Python kernel:
    compiling inside `init_process_group` would keep this rank from its first collective for half
    a minute while its peers wait in theirs). Returns "started", or why not: the path of the
    failed build's log, or "unavailable"."""
    try:
        name = module_name()
    except Exception:
        return "unavailable"
    if _untrusted_build(cache_root() / name) is not None:
        return "unavailable"
    failed = cache_root() / name / FAILED_MARKER
    if failed.exists():
        return str(failed)
    command = [sys.executable, "-m", "collcheck.runtime.native_recorder", "build", "--quiet"]
    try:
        subprocess.Popen(
            command,
            env=build_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not stopped with the job's process group
        )
    except OSError:
        return "unavailable"
    return "started"


def build_env() -> dict[str, str]:
    """The environment of a build subprocess: no tracing switches (it must not trace itself), the
    cache folder this process uses, and this interpreter's folder first on PATH, where a
    pip-installed ninja sits without an activated venv."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("COLLCHECK_")}
    env[ENV_NATIVE_DIR] = str(cache_root())
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


# torch.utils.cpp_extension's own lock (a FileBaton: a file it creates, and removes when done).
# A build killed mid-way (SIGTERM from `timeout`, a job scheduler) leaves it behind, and every later
# cpp_extension.load in that folder then waits for it forever.
TORCH_BATON = "lock"
INTERRUPT_EXITS = (130, 143)  # 128 + SIGINT, 128 + SIGTERM: how shells and Python report them


def discard_interrupted_build(directory: Path) -> None:
    """What an interrupted build left in the staging folder: torch's lock file. Called only under
    collcheck's flock, which every builder, and the compiler process itself, holds (the compile
    subprocess inherits it): a baton found here belongs to no live build."""
    with contextlib.suppress(FileNotFoundError):
        (directory / "staging" / TORCH_BATON).unlink()


def interrupted(done: subprocess.CompletedProcess[str]) -> bool:
    """Whether the compile subprocess was stopped (a signal, Ctrl-C) rather than failing: an
    interrupted build is no reason to give up the native recorder until someone deletes a marker."""
    if done.returncode < 0 or done.returncode in INTERRUPT_EXITS:
        return True
    text = done.stdout + done.stderr
    return "KeyboardInterrupt" in text or "interrupted by user" in text  # ninja's own words


def _run_build(name: str, directory: Path, lock: int) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "collcheck.runtime.native_recorder", "compile", name, str(directory)]
    try:
        return subprocess.run(
            command,
            env=build_env(),
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            pass_fds=(lock,),  # the compiler holds the flock too: its lock outlives a killed parent
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, 1, "", f"build timed out after {BUILD_TIMEOUT_S:.0f} s\n")


def _compile(name: str, directory: str) -> None:
    """In the build subprocess. The linker writes the library in place, so it is built in a
    staging folder and renamed into `directory` when complete: a rank that looks for it without
    the lock sees it whole or not at all."""
    from torch.utils import cpp_extension

    staging = os.path.join(directory, "staging")
    os.makedirs(staging, exist_ok=True)
    cpp_extension.load(
        name=name,
        sources=[str(SOURCE)],
        build_directory=staging,
        extra_cflags=["-O2"],
        is_python_module=True,
        verbose=False,
    )
    library = os.path.join(directory, f"{name}.so")
    os.replace(os.path.join(staging, f"{name}.so"), library)
    os.chmod(library, 0o700)  # whatever the umask: a group-writable library would not be loaded


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[int]:
    """flock: released by the kernel when the holders die, so a killed build never blocks a rank.
    Yields the locked descriptor, for a subprocess that must hold the lock as well."""
    handle = open(path, "a+")  # noqa: SIM115  (held for the duration of the block)
    try:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{path} held for {LOCK_TIMEOUT_S:.0f} s") from None
                time.sleep(0.2)
        yield handle.fileno()
    finally:
        handle.close()


def warn(text: str) -> None:
    sys.stderr.write(f"collcheck: {text}\n")
    sys.stderr.flush()


# ---------------------------------------------------------------------------------------------
# Driving it from the tracer


class NativeRecorder:
    """The Python side of the native kernel: answers its questions about groups, code objects,
    call sites and threads (once each), and reads back what is in flight for the monitor."""

    def __init__(
        self, module: ModuleType, rank: int, main_thread_ident: int | None, encoder: CollectiveEncoder
    ) -> None:
        self.module = module
        self.rank = rank
        self._main = main_thread_ident
        self._encoder = encoder  # the Python kernel's, writing the same file: one numbering of gids

    def start(self, fd: int, gate: Callable[[str], None] | None = None, binary: object | None = None) -> None:
        """`gate` (async verify): the kernel keeps every `coll` line for `drain` and calls
        `gate(line)` before the first collective of each (group, op, call site) is issued.
        `binary`: the module's BinaryTrace that owns a binary trace file
        (trace_live.BinaryTraceWriter.use_native), written through instead of `fd`."""
        self.module.configure(
            self.rank, json.dumps(self.rank), self._group_info, _skip_code, self._site_json, _thread_piece
        )
        self.module.watch(gate)  # None: an earlier tracer's watching stops
        self.module.start(fd, binary)

    def drain(self) -> tuple[list[str], int]:
        """(the `coll` lines issued since the last drain, in issue order; how many were not kept,
        the queue being full). Async verify only."""
        lines, unwatched = self.module.drain()
        return list(lines), int(unwatched)

    def _group_info(self, name: str) -> tuple[list[int], str, int, str]:
        """(global ranks, name as JSON, gid, `group` line) of the c10d group `name`."""
        ranks, desc = _group_members(name)
        group = self._encoder.group(name, tuple(ranks), desc)
        return ranks, json.dumps(name), group.gid, group.text

    def _site_json(self) -> str:
        from collcheck.runtime.hook import call_site

        return call_site(self._main).encoded

    def snapshot(self) -> tuple[dict[str, int], list[str], str, bool]:
        """(issued per group, in-flight lines oldest first, last line, its completion)."""
        issued, inflight, last, last_done = self.module.snapshot()
        return dict(issued), list(inflight), str(last), bool(last_done)

    def flush(self) -> None:
        self.module.flush()

    def lost(self) -> int:
        """Lines the kernel could not write (a full disk) since it started."""
        return int(self.module.lost())

    def stop(self) -> None:
        self.module.stop()


def _group_members(name: str) -> tuple[list[int], str]:
    """(global ranks, description) of the c10d group `name`."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    try:
        group = c10d._resolve_process_group(name)  # type: ignore[attr-defined, arg-type]
        ranks = list(dist.get_process_group_ranks(group))
        desc = str(getattr(group, "group_desc", "") or "")
    except Exception:  # a group c10d does not know: the world's ranks
        ranks, desc = list(range(dist.get_world_size())), ""
    return ranks, desc


def _skip_code(code: CodeType) -> bool:
    from collcheck.runtime.hook import skipped_file

    return skipped_file(code.co_filename)


def _thread_piece() -> str:
    return f',"thread":{json.dumps(threading.current_thread().name)},"t_start":'


def main(argv: list[str]) -> int:
    if argv[:1] == ["compile"] and len(argv) == 3:
        _compile(argv[1], argv[2])
        return 0
    if argv[:1] == ["build"]:
        return 0 if load(build=True, quiet="--quiet" in argv) is not None else 1
    sys.stderr.write("usage: python -m collcheck.runtime.native build\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
