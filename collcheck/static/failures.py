"""Calls that may fail on one rank alone: the exceptions a `try` can catch on some ranks only.

In: a call (`ast.Call`), its qualified name when its head is an import, whether it is handed a
process group, the catalog's per-process sources. Out: a verdict. Read by the handlers
(`handlers.ExceptionFlow`): a handler that catches such a failure and lets its rank go on is a
branch that one rank can take alone.

What fails on one rank alone is what reads or writes that process's own world: files and the
filesystem (`open`, `torch.save`, `shutil`, `os.rename`, a catalogued per-process source, a file
object's `write`), a future's `result()`, the network and other processes (`requests`,
`subprocess`); and code handed in as a callable (`launch()`: a kernel launch, a step). Not a
collective or an unknown call handed a process group (it communicates: a timeout or a broken group
is seen by every member), nor a method of an unknown object or a library's function: on real code
their failures come from their inputs (a weight missing from a checkpoint every rank reads, a
shape a kernel does not support), the same on every rank. Measured on torch, deepspeed, composer,
vllm and sglang: taking every unknown call as one that may fail alone reported 20 new findings,
nearly all of that kind.

Names here are those of an API (a module's function, a method of a file object or a future),
never of a variable of the analysed code.
"""

from __future__ import annotations

import ast
import builtins

from collcheck.static.syntax import catches_data_errors

# torch's functions that read or write files: their failure is the process's own.
TORCH_IO = frozenset({"torch.load", "torch.save"})


def may_fail_alone(
    call: ast.Call, qualified: str | None, handed_group: bool, per_process: frozenset[str]
) -> bool:
    """May `call` raise on one rank while the others' same call returns? `qualified`: its
    qualified name when the callee is a module's function (None for a method of an object or a
    callable held in a variable); `handed_group`: an argument is a process group; `per_process`:
    the catalog's per-process sources (`os.path.exists`, `open`). Yes for what touches the
    process's own world (`touches_own_world`) and for a callable held in a variable (code handed
    in: a kernel launch, a step); not for a method of an unknown object or a library function,
    whose failures on real code are those of its inputs, alike on every rank (a missing weight,
    an unsupported shape)."""
    if handed_group:
        return False
    if touches_own_world(call, qualified, per_process):
        return True
    func = call.func
    return qualified is None and isinstance(func, ast.Name) and not hasattr(builtins, func.id)


BROAD_CLASSES = frozenset({"Exception", "BaseException"})


def catches_broadly(handler: ast.ExceptHandler, bases: dict[str, list[str]]) -> bool:
    """`handler` catches whatever a call may raise: a bare `except:`, `Exception`, `BaseException`,
    or a data or I/O error (`syntax.catches_data_errors`)."""
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    for item in types:
        name = item.attr if isinstance(item, ast.Attribute) else item.id if isinstance(item, ast.Name) else ""
        if name in BROAD_CLASSES:
            return True
    return catches_data_errors(handler, bases)


def always_raises(body: list[ast.stmt]) -> bool:
    """Every way through `body` ends in a `raise` (`log(error); raise`)."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, ast.Raise):
        return True
    if isinstance(last, ast.If):
        return always_raises(last.body) and always_raises(last.orelse)
    return False


# Modules whose functions read or write the process's own world (files, processes, the network).
OWN_WORLD_MODULES = frozenset(
    {"os", "shutil", "pathlib", "json", "pickle", "subprocess", "requests", "urllib", "socket", "tempfile"}
)
# Module functions of those that only compute (paths, the environment as the launcher set it).
COMPUTED_ONLY = frozenset(
    {
        "os.environ.get", "os.getenv", "os.path.join", "os.path.basename", "os.path.dirname",
        "os.path.abspath", "os.path.normpath", "os.path.splitext", "os.path.relpath",
        "os.path.expanduser", "os.getpid", "os.cpu_count", "os.fspath",
        "json.loads", "json.dumps", "pickle.loads", "pickle.dumps",
    }
)  # fmt: skip
# Methods that read or write files or wait for another process's work (a future's `result`).
OWN_WORLD_METHODS = frozenset(
    {
        "result", "read", "write", "open", "mkdir", "rename", "unlink", "rmdir", "touch", "read_text",
        "write_text", "read_bytes", "write_bytes", "exists", "is_file", "is_dir", "iterdir", "stat",
        "flush",
    }
)  # fmt: skip


def touches_own_world(call: ast.Call, qualified: str | None, per_process: frozenset[str]) -> bool:
    """Does `call` read or write what belongs to this process alone (a file, a future, the
    network)? Narrower than `may_fail_alone`: a failure recorded in a flag that later code reads
    is taken to differ between ranks only for these, since a value computed by unknown code
    (`t = run(choice)`, with `t = inf` on failure) is, as every unknown call's result, taken to
    be the same on every rank."""
    if qualified is not None:
        if qualified in per_process or qualified in TORCH_IO:
            return True
        return qualified.split(".", 1)[0] in OWN_WORLD_MODULES and qualified not in COMPUTED_ONLY
    func = call.func
    if isinstance(func, ast.Name):
        return func.id == "open"
    return isinstance(func, ast.Attribute) and func.attr in OWN_WORLD_METHODS
