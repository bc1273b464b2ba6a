"""## What it does
Flags `torch.distributed.all_gather_object` called on a tensor: a tensor factory result, a
`.cpu()`/`.detach()`/`.clone()`/`.to()` result, a `.grad`, or a parameter annotated `torch.Tensor`.
When the tensor's size is computable (see CC101), the message gives the peak per rank.

## Why is this bad?
`all_gather_object` pickles the object, pads every rank's bytes to the largest, gathers the padded
buffers and unpickles them again: about `(2N + 3) × s` bytes at the peak for an `s`-byte tensor on
`N` ranks, through host memory, and several times slower than `all_gather_into_tensor`, which moves
the tensor's bytes once into a preallocated output of `N × s`.

## Example
```python
def gather_keys(local_k: torch.Tensor) -> list:
    gathered = [None] * world_size
    dist.all_gather_object(gathered, local_k)
    return gathered
```

## Use instead
```python
def gather_keys(local_k: torch.Tensor) -> torch.Tensor:
    full_k = torch.empty(world_size * local_k.shape[0], *local_k.shape[1:], dtype=local_k.dtype)
    dist.all_gather_into_tensor(full_k, local_k)
    return full_k
```

## Fix safety
`--fix --unsafe-fixes` gathers into a tensor preallocated with `new_empty` through
`all_gather_into_tensor` and leaves one tensor per rank in the output list. Unsafe: every rank
must then pass the same shape and dtype, on the device its backend expects.

## References
- [torch.distributed.all_gather_object](https://pytorch.org/docs/stable/distributed.html#torch.distributed.all_gather_object)
  ("uses pickle module implicitly"; objects must be picklable)
"""

from __future__ import annotations

import ast
from enum import Enum

from collcheck.findings import Finding, Severity
from collcheck.memory.gather_sites import FunctionBody, argument, functions
from collcheck.memory.static_sizes import (
    Evaluator,
    memory_symbols,
    module_constants,
    own_nodes,
    single_assignments,
)
from collcheck.memory.units import describe
from collcheck.static.context import ModuleContext

CODE = "CC102"
NAME = "all-gather-object-on-tensors"
SEVERITY = Severity.WARNING
MESSAGE = "all_gather_object pickles the tensor `{obj}`{peak}; use all_gather_into_tensor"
DEFAULT_ENABLED = False


class Variant(Enum):
    """The shapes of this rule's findings, for the fixers (collcheck.adopt.fixers) to match on."""

    TENSOR = "tensor"  # MESSAGE, the only one


def variant(finding: Finding) -> Variant | None:
    return Variant.TENSOR if finding.code == CODE else None


TENSOR_METHODS = frozenset(
    {"cpu", "cuda", "detach", "clone", "to", "contiguous", "float", "half", "bfloat16"}
)
NOT_TENSORS = ("torch.distributed.", "torch.device", "torch.Size", "torch.dtype")


class _Tensors:
    """Decides whether an expression of one function is a tensor, from what the source shows."""

    def __init__(self, context: ModuleContext, function: FunctionBody, evaluator: Evaluator) -> None:
        self.context = context
        self.function = function
        self.evaluator = evaluator
        self.local = single_assignments(function.body, function.params)
        self.seen: set[str] = set()

    def is_tensor(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if isinstance(node, ast.Attribute):
            return node.attr == "grad"
        if not isinstance(node, ast.Call):
            return False
        qualified = self.context.qualified_name(node.func) or ""
        if qualified.startswith("torch.") and not qualified.startswith(NOT_TENSORS):
            return True
        return isinstance(node.func, ast.Attribute) and node.func.attr in TENSOR_METHODS

    def _name(self, name: str) -> bool:
        annotation = self.function.annotations.get(name)
        if annotation is not None and self.context.qualified_name(annotation) == "torch.Tensor":
            return True
        if name in self.seen or name not in self.local:
            return False
        self.seen.add(name)
        return self.is_tensor(self.local[name])


def _peak(evaluator: Evaluator, obj: ast.expr) -> str:
    size = evaluator.tensor(obj)
    world = evaluator.world_size()
    if size is None or world is None:
        return ""
    return f", about {describe((2 * world + 3) * size.nbytes)} at the peak on each of {world} ranks"


def check_module(context: ModuleContext) -> list[Finding]:
    symbols = memory_symbols(context.settings.memory_settings())
    constants = module_constants(context.tree)
    findings: list[Finding] = []
    for function in functions(context.tree):
        evaluator = Evaluator(context, symbols, constants, single_assignments(function.body, function.params))
        tensors = _Tensors(context, function, evaluator)
        for node in own_nodes(function.body):
            if not isinstance(node, ast.Call):
                continue
            spec = context.catalog.functions.get(context.qualified_name(node.func) or "")
            obj = argument(node, spec, "obj") if spec is not None and spec.op == "all_gather_object" else None
            if obj is None or not tensors.is_tensor(obj):
                continue
            args = {"obj": ast.unparse(obj), "peak": _peak(evaluator, obj)}
            findings.append(
                Finding(
                    code=CODE,
                    severity=SEVERITY,
                    location=context.location(node),
                    message_template=MESSAGE,
                    message_args=tuple(sorted(args.items())),
                    function=function.name,
                )
            )
    return findings


# Before/after pairs for collcheck.adopt.fixers (tests/test_fixes.py): gather into a preallocated tensor
# (unsafe: every rank must now pass the same shape and dtype).
FIX_EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "import torch\nimport torch.distributed as dist\n\n\ndef share(k: torch.Tensor, n):\n"
        "    out = [None] * n\n    dist.all_gather_object(out, k)\n    return out\n",
        "import torch\nimport torch.distributed as dist\n\n\ndef share(k: torch.Tensor, n):\n"
        "    out = [None] * n\n    out_tensor = k.new_empty((dist.get_world_size(), *k.shape))\n"
        "    dist.all_gather_into_tensor(out_tensor, k)\n    out[:] = out_tensor.unbind(0)\n    return out\n",
    ),
)
