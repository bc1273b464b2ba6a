"""Calls that may fail on one rank alone: the exceptions a `try` can catch on some ranks only.

In: a call (`ast.Call`), its qualified name when its head is an import, whether it is handed a
process group, the catalog's per-process sources. Out: a verdict. Read by the handlers
(`handlers.ExceptionFlow`): a handler that catches such a failure and lets its rank go on is a
branch that one rank can take alone.

What fails on one rank alone is what reads or writes that process's own world: files and the
filesystem (`open`, `torch.save`, `shutil`, `os.rename`, a catalogued per-process source), a future's
`result()`, a remote call, a kernel launched by code the analysis does not see (a callable handed
in, a method of an object of another library). What cannot, or fails on every rank alike:

* a collective, or an unknown call handed a process group (it communicates: a timeout or a broken
  group is seen by every member);
* pure builtins (`len`, `int`, `sorted`), arithmetic, the standard library's pure modules (`math`,
  `time`, `warnings`, `logging`);
* torch's own functions and the methods of containers, strings and tensors (`append`, `get`,
  `item`, `to`): their failures are programming errors, met by every rank with the same inputs;
* logging methods (`info`, `warning`).

Names here are those of an API (a module's function, a method of a builtin type), never of a
variable of the analysed code.
"""

from __future__ import annotations

import ast
import builtins

from collcheck.static.syntax import catches_data_errors

PURE_BUILTINS = frozenset(
    {
        "abs", "all", "any", "bool", "callable", "dict", "divmod", "enumerate", "filter", "float",
        "format", "frozenset", "getattr", "hasattr", "hash", "id", "int", "isinstance", "issubclass",
        "iter", "len", "list", "map", "max", "min", "next", "object", "print", "range", "repr",
        "reversed", "round", "set", "setattr", "slice", "sorted", "str", "sum", "super", "tuple",
        "type", "vars", "zip",
    }
)  # fmt: skip
# Standard modules whose functions compute or report and do not touch the process's own world.
PURE_MODULES = frozenset(
    {
        "math", "statistics", "time", "warnings", "logging", "typing", "functools", "itertools",
        "collections", "copy", "re", "dataclasses", "operator", "contextlib", "enum", "abc",
        "numbers", "string", "textwrap", "inspect", "traceback", "random", "datetime", "sys",
    }
)  # fmt: skip
# torch's functions that read or write files: their failure is the process's own.
TORCH_IO = frozenset({"torch.load", "torch.save"})
# Methods of builtin containers, strings, tensors and loggers: they fail, if at all, alike.
PURE_METHODS = frozenset(
    {
        "append", "extend", "insert", "pop", "remove", "clear", "get", "items", "keys", "values",
        "update", "setdefault", "copy", "add", "discard", "index", "count", "sort", "format",
        "join", "split", "rsplit", "strip", "lstrip", "rstrip", "startswith", "endswith",
        "replace", "lower", "upper", "encode", "decode", "item", "tolist", "numpy", "size", "dim",
        "numel", "view", "reshape", "flatten", "to", "cpu", "cuda", "detach", "clone", "contiguous",
        "float", "half", "bfloat16", "long", "int", "bool", "zero_", "fill_", "copy_", "add_",
        "mul_", "div_", "sub_", "sum", "mean", "max", "min", "argmax", "argmin", "norm", "abs",
        "debug", "info", "warning", "warn", "error", "exception", "critical", "log",
        "perf_counter", "time", "set_description", "set_postfix",
    }
)  # fmt: skip


def may_fail_alone(
    call: ast.Call, qualified: str | None, handed_group: bool, per_process: frozenset[str]
) -> bool:
    """May `call` raise on one rank while the others' same call returns? `qualified`: its
    qualified name when the callee is a module's function (None for a method of an object or a
    callable held in a variable); `handed_group`: an argument is a process group; `per_process`:
    the catalog's per-process sources (`os.path.exists`, `open`)."""
    if handed_group:
        return False
    if qualified is not None:
        if qualified in per_process or qualified in TORCH_IO:
            return True
        root = qualified.split(".", 1)[0]
        if root == "torch" or root in PURE_MODULES or root == "builtins":
            return False
        return not (qualified == "os.environ.get" or qualified.startswith("os.path.join"))
    func = call.func
    if isinstance(func, ast.Name):
        if func.id == "open":
            return True
        return not (func.id in PURE_BUILTINS or hasattr(builtins, func.id))
    if isinstance(func, ast.Attribute):
        return func.attr not in PURE_METHODS
    return True


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
        "json.loads", "json.dumps",
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
