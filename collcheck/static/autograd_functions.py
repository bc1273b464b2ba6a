"""`Fn.apply(x)` of a `torch.autograd.Function` subclass of the file runs its `forward`.

In: the module model, a class name, and the framework classes it derives from (`class_types`).
Out: the `forward` that `Fn.apply(...)` runs and the call as `forward` sees it (`Partial`: a
context object bound before the caller's arguments), or None.

Tensor-parallel code wraps its collectives in autograd Functions (`class _Reduce(Function):
forward all-reduces, backward passes the gradient`) and calls them through the `apply` that torch
defines: no `def apply` of the file says what the call runs, so without this the call is unknown
code. PyTorch calls `forward(ctx, *args)`; a Function that defines `setup_context` (torch >= 2.0)
takes its arguments without the context. `backward` is not run: it runs in the backward pass, which
`loss.backward()` starts (gradient_sync.py), not at `apply`.
"""

from __future__ import annotations

import ast

from collcheck.static.loader import FunctionNode, ModuleInfo, inherited
from collcheck.static.receivers import Partial
from collcheck.static.symbolic import Atom

AUTOGRAD_FUNCTIONS = frozenset(
    {
        "torch.autograd.Function",
        "torch.autograd.function.Function",
        "torch.autograd.function.InplaceFunction",
    }
)
APPLY = "apply"


def applied_forward(
    module: ModuleInfo, class_name: str, framework_bases: frozenset[str], call: ast.Call
) -> tuple[FunctionNode, Partial] | None:
    """What `class_name.apply(...)` (`call`) runs: the class's `forward`, called with a context
    before the caller's arguments (none for a Function with `setup_context`)."""
    if not framework_bases & AUTOGRAD_FUNCTIONS:
        return None
    if inherited(module, class_name, APPLY, lambda info: info.methods) is not None:
        return None  # the class defines its own `apply`: an ordinary method, looked up as one
    forward = inherited(module, class_name, "forward", lambda info: info.methods)
    if forward is None:
        return None
    if inherited(module, class_name, "setup_context", lambda info: info.methods) is not None:
        return forward, Partial(forward, (), (), {})
    context = ast.copy_location(ast.Constant(None), call)
    value = Atom(f"autograd-context:{module.path}::{class_name}@{call.lineno}:{call.col_offset}", "shared")
    return forward, Partial(forward, (context,), (), {id(context): value})
