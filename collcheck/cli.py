"""The command line's entry point, kept light: `main(argv) -> int` is callable from tests.

`collcheck PATH...` is `collcheck check PATH...`. A `collcheck check FILE...` with no options (how
pre-commit calls it) or only the common ones (`--format`, `-o`, `-j N`, `--select`, `--ignore`,
`--no-cache`, `-v`, ...: `LIGHT_FLAGS`, `LIGHT_VALUES`) is run without the option parser, so that
one staged file on a warm cache never imports typer (and its pydantic adapters: most of a warm
run's time); every other command line goes through the typer commands in `collcheck.commands`.
Exit codes: 0 clean, 1 findings (or files that could not be analysed), 2 usage or configuration
error.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from collcheck import __version__

SUBCOMMANDS = ("check", "summarize", "rule", "rules", "estimate", "run", "trace", "convert-trace", "version")


def _with_default_command(argv: list[str]) -> list[str]:
    """`collcheck src/` means `collcheck check src/`, as with ruff."""
    if not argv:
        return argv
    first = argv[0]
    if first in SUBCOMMANDS or first in ("-h", "--help", "--version"):
        return argv
    return ["check", *argv]


# Options whose value is optional (`--add-ignore` or `--add-ignore=REASON`); click's options
# always take one, so the bare form is given the empty value before parsing.
OPTIONAL_VALUE_OPTIONS = ("--add-ignore",)


def _with_optional_values(argv: list[str]) -> list[str]:
    if argv[:1] != ["check"] and argv[:1] and argv[0] in SUBCOMMANDS:  # only `check` has them
        return argv
    if "--" in argv:  # nothing after `--` is an option
        cut = argv.index("--")
        return [*_with_optional_values(argv[:cut]), *argv[cut:]]
    return [f"{arg}=" if arg in OPTIONAL_VALUE_OPTIONS else arg for arg in argv]


# `check` options common in CI and hooks (`--format sarif -o report.sarif -j 2`), read without
# typer; anything else (fixes, baselines, timeouts, `-j2`, `--help`) goes through typer.
LIGHT_FLAGS = {
    "--no-cache": "no_cache",
    "--statistics": "statistics",
    "--exit-zero": "exit_zero",
    "--verbose": "verbose",
    "-v": "verbose",
}
LIGHT_VALUES = {
    "--format": "output_format",
    "--output-format": "output_format",
    "--output": "output",
    "-o": "output",
    "--jobs": "jobs",
    "-j": "jobs",
    "--select": "select",
    "--extend-select": "extend_select",
    "--ignore": "ignore",
    "--python": "python",  # a hook that names its environment stays light
}


def light_check(args: list[str]) -> tuple[list[Path], dict[str, object]] | None:
    """The paths and options of a `check PATH...` command line that uses only the common options
    above, as `CheckOptions` fields; None when typer must parse it (another option, a value it
    would refuse, no path: `collcheck check` alone checks "." with the parser's defaults)."""
    if args[:1] != ["check"]:
        return None
    rest = args[1:]
    cut = rest.index("--") if "--" in rest else len(rest)
    paths: list[Path] = []
    fields: dict[str, object] = {}
    index = 0
    while index < cut:
        arg = rest[index]
        index += 1
        if not arg.startswith("-") or arg == "-":
            paths.append(Path(arg))
            continue
        name, has_value, value = arg.partition("=")
        if name in LIGHT_FLAGS and not has_value:
            fields[LIGHT_FLAGS[name]] = True
            continue
        if name not in LIGHT_VALUES:
            return None
        if not has_value:
            if index >= cut:
                return None
            value = rest[index]
            index += 1
        field = LIGHT_VALUES[name]
        if field == "jobs":
            if not value.isdigit() or int(value) < 1:
                return None  # typer's message says why
            fields[field] = int(value)
        else:
            fields[field] = Path(value) if field == "output" else value
    paths.extend(Path(arg) for arg in rest[cut + 1 :])
    return (paths, fields) if paths else None


def main(argv: list[str] | None = None) -> int:
    """Entry point callable from tests: returns the exit code instead of exiting."""
    args = _with_optional_values(list(sys.argv[1:] if argv is None else argv))
    if args[:1] == ["--version"]:
        print(f"collcheck {__version__}")
        return 0
    args = _with_default_command(args)
    parsed = light_check(args)
    if parsed is not None:
        from collcheck.checking import CheckOptions, run_check

        paths, fields = parsed
        return run_check(paths, CheckOptions(**fields))  # type: ignore[arg-type]
    return _run_commands(args)


def _run_commands(args: list[str]) -> int:
    import typer

    from collcheck.commands import app

    try:
        code = app(args=args, prog_name="collcheck", standalone_mode=False)
    except typer.Exit as done:
        return int(done.exit_code)
    except typer.Abort:
        return 130
    except SystemExit as done:
        if _typer_met_a_closed_pipe():
            return BROKEN_PIPE_EXIT
        return int(done.code or 0)
    except Exception as error:
        show = getattr(error, "show", None)
        if callable(show) and hasattr(error, "exit_code"):  # usage errors: bad option, missing argument
            show()
            return 2
        raise
    return int(code or 0)


# What a shell reports for a program killed by SIGPIPE (`yes | head`): the reader closed the pipe.
BROKEN_PIPE_EXIT = 141


def _typer_met_a_closed_pipe() -> bool:
    """Typer answers a closed stdout itself: it wraps the stream in click's PacifyFlushWrapper and
    exits 1, which here means "findings". The wrapper is how to tell (an internal name: without
    it the exit stays 1, as before)."""
    vendored = sys.modules.get("typer._click.utils")
    wrapper = getattr(vendored, "PacifyFlushWrapper", None)
    return wrapper is not None and isinstance(sys.stdout, wrapper)


def _stdout_is_closed() -> bool:
    """Whether standard output is a pipe whose reader is gone (where `poll` can tell; else yes)."""
    import select

    try:
        descriptor = sys.stdout.fileno()
    except (OSError, ValueError):
        return True
    if not hasattr(select, "poll"):
        return True
    poller = select.poll()
    poller.register(descriptor, select.POLLOUT)
    return any(mask & (select.POLLERR | select.POLLHUP) for _, mask in poller.poll(0))


def run_main() -> None:
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # `collcheck check src | head`: the reader is gone; say nothing more, and keep Python from
        # failing again when it flushes stdout at exit. A broken pipe of another stream (a worker's)
        # is an error like any other.
        if not _stdout_is_closed():
            raise
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = BROKEN_PIPE_EXIT
    sys.exit(code)
