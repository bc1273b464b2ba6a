"""`collcheck run`: start a command with the tracer switched on in every Python process it starts.

No code changes: the boot directory (holding a `sitecustomize`) goes first on PYTHONPATH and the
COLLCHECK_* variables carry the settings, so `python train.py` and every `torchrun` worker arm the
tracer themselves. The launcher only waits, forwards Ctrl-C, and returns the exit status; it never
imports torch.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from collcheck.runtime import jobtree
from collcheck.runtime.record import TRACE_PREFIX, TRACE_SUFFIX, UnsafeLocation, make_folder
from collcheck.runtime.trace_binary import BINARY_SUFFIX
from collcheck.runtime.trace_live import open_collectives

BOOT_DIR = str(Path(__file__).resolve().parent / "boot")
PACKAGE_HOME = str(Path(__file__).resolve().parents[2])
INTERRUPTED = 130
GRACE_S = 5.0
POLL_S = 1.0


def signal_name(number: int) -> str:
    """`SIGTERM` for 15."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True)
class RunOutcome:
    returncode: int  # negative: the job's first process was ended by that signal
    interrupted: bool
    hung: bool
    seconds: float

    @property
    def signal_name(self) -> str | None:
        """SIGKILL for returncode -9; None when the job exited by itself."""
        return signal_name(-self.returncode) if self.returncode < 0 else None

    @property
    def exit_status(self) -> int:
        """The status `collcheck run` exits with: a shell's 128 + N for a job ended by signal N."""
        return 128 - self.returncode if self.returncode < 0 else self.returncode


def tracing_env(base: dict[str, str], settings: dict[str, str]) -> dict[str, str]:
    """The environment for the traced command: boot dir first on PYTHONPATH plus the settings."""
    env = dict(base)
    env.update(settings)
    env["COLLCHECK_HOME"] = PACKAGE_HOME
    existing = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = BOOT_DIR + (os.pathsep + existing if existing else "")
    return env


def prepare_trace_dir(trace_dir: str, allow_shared: bool) -> str | None:
    """Make the trace folder ready before the job starts: created, not another user's shared
    folder (record.check_folder), writable, cleared of a previous run's traces. Returns why the job
    could not be traced there, or None: a job whose ranks cannot write their traces would
    otherwise run untraced, each rank only printing a warning."""
    try:
        make_folder(trace_dir, allow_shared)
        _probe_writable(trace_dir)
        clear_old_traces(trace_dir)
    except UnsafeLocation as error:
        return str(error)
    except OSError as error:
        where = error.filename or trace_dir
        return f"cannot write traces to {trace_dir} ({where}: {error.strerror or error})"
    return None


def _probe_writable(trace_dir: str) -> None:
    """Create and remove a file: the one test that holds for root, read-only mounts and ACLs."""
    probe = os.path.join(trace_dir, f".collcheck-probe-{os.getpid()}")
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    os.remove(probe)


def clear_old_traces(trace_dir: str) -> None:
    """Remove collcheck's own files from a previous run, so the analysis sees this run only."""
    if not os.path.isdir(trace_dir):
        return
    for name in os.listdir(trace_dir):
        if name.startswith(TRACE_PREFIX) and name.endswith((TRACE_SUFFIX, BINARY_SUFFIX)):
            os.remove(os.path.join(trace_dir, name))


def run(
    command: list[str], env: dict[str, str], trace_dir: str | None = None, hang_after_s: float | None = None
) -> RunOutcome:
    """Run `command` in its own session; a detected hang, Ctrl-C, or SIGTERM/SIGHUP sent to this
    process end every process of the job (jobtree.py: torchrun's workers run in sessions of their
    own), with SIGTERM (SIGINT for Ctrl-C), then SIGKILL.

    The hang check is a backstop for what the in-process watchdog cannot report (it needs a live
    Python thread in the stuck rank): a collective recorded as issued and not completed for
    `hang_after_s` seconds in some rank's trace.
    """
    started = time.monotonic()
    jobtree.become_subreaper()
    # The launcher gets SIGTERM if `collcheck run` dies unhandled (SIGKILL, the OOM killer):
    # torchrun then stops its workers, as on any SIGTERM, and the job never outlives the tool.
    arm = jobtree.parent_death_signal(signal.SIGTERM)
    process = subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=arm)
    watcher = _TraceWatcher(trace_dir) if trace_dir and hang_after_s else None
    try:
        with _terminations_raise():
            while True:
                try:
                    returncode = process.wait(timeout=POLL_S)
                    return RunOutcome(returncode, False, False, time.monotonic() - started)
                except subprocess.TimeoutExpired:
                    jobtree.reap(keep=(process.pid,))
                if (
                    watcher is not None
                    and hang_after_s is not None
                    and watcher.oldest_open_age() > hang_after_s
                ):
                    _stop_job(process, signal.SIGTERM)
                    return RunOutcome(process.returncode or 1, False, True, time.monotonic() - started)
    except KeyboardInterrupt:
        _stop_job(process, signal.SIGINT)
        return RunOutcome(INTERRUPTED, True, False, time.monotonic() - started)
    except _Terminated as stopped:
        _stop_job(process, signal.SIGTERM)
        return RunOutcome(128 + stopped.signum, True, False, time.monotonic() - started)


class _Terminated(Exception):
    """`collcheck run` itself was asked to stop (a CI timeout's SIGTERM, a closed terminal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _terminations_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise _Terminated while the job runs, so that it is ended with us."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise _Terminated(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _TraceWatcher:
    """Follows the rank traces as they grow and tracks collectives without a completion line."""

    def __init__(self, trace_dir: str) -> None:
        self.trace_dir = trace_dir
        self._offsets: dict[str, int] = {}
        self._open: dict[tuple[str, str, int], float] = {}

    def oldest_open_age(self) -> float:
        self._read_new()
        if not self._open:
            return 0.0
        return time.time() - min(self._open.values())

    def _read_new(self) -> None:
        if not os.path.isdir(self.trace_dir):
            return
        for name in os.listdir(self.trace_dir):
            if name.startswith(TRACE_PREFIX) and name.endswith(TRACE_SUFFIX):
                self._follow(os.path.join(self.trace_dir, name))
            elif name.startswith(TRACE_PREFIX) and name.endswith(BINARY_SUFFIX):  # written live
                path = os.path.join(self.trace_dir, name)
                for key in [key for key in self._open if key[0] == path]:
                    del self._open[key]
                for offset, started in open_collectives(path):
                    self._open[(path, "", offset)] = started

    def _follow(self, path: str) -> None:
        offset = self._offsets.get(path, 0)
        with open(path, "rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offsets[path] = offset + len(complete)
        for line in complete.splitlines():
            self._note(path, line)

    def _note(self, path: str, line: bytes) -> None:
        """One line; a malformed one is ignored (`collcheck trace` reports it afterwards)."""
        try:
            row = json.loads(line)
            kind = row.get("ev")
            if kind == "coll":
                started = float(row["t_start"])
                if math.isfinite(started):
                    self._open[(path, str(row["group"]), int(row["seq"]))] = started
            elif kind == "done":
                self._open.pop((path, str(row["group"]), int(row["seq"])), None)
            elif kind == "exit":
                for key in [key for key in self._open if key[0] == path]:
                    del self._open[key]
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError):
            return


def _stop_job(process: subprocess.Popen[bytes], first: signal.Signals) -> None:
    """End every process of the job (a second Ctrl-C or SIGTERM meanwhile skips to SIGKILL)."""
    with _terminations_raise():
        try:
            jobtree.end_all(first, GRACE_S, leader=process.pid)
        except (KeyboardInterrupt, _Terminated):
            jobtree.end_all(signal.SIGKILL, 0.0, leader=process.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=GRACE_S)
