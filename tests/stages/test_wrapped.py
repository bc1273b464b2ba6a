"""Stage `wrapped`: names that hold an object communicating when used — a wrapped model or an
engine (`wrapped_names` -> `WrappedNames`), and the calls that may go through one
(`uses_wrapped`)."""

from __future__ import annotations

import ast

from collcheck.static.names import module_imports
from collcheck.static.wrapped import WrappedNames, uses_wrapped, wrapped_names

from .conftest import call, catalog

SOURCE = """
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.fsdp import fully_shard
class Trainer:
    def __init__(self, net):
        self.model = DDP(net)
def build(net, other):
    fully_shard(other)
    plain = list(net)
"""


def found(source: str) -> WrappedNames:
    tree = ast.parse(source)
    return wrapped_names(tree, module_imports(tree), catalog())


def test_names_bound_to_a_wrapped_object_and_the_factories() -> None:
    wrapped = found(SOURCE)
    assert {"model", "other"} <= wrapped.names  # `self.model = DDP(net)`, `fully_shard(other)` in place
    assert "plain" not in wrapped.names
    assert {"DDP", "fully_shard"} <= wrapped.factories


def test_a_module_without_a_factory_has_none() -> None:
    assert found("import json\ndef f(x):\n    return json.dumps(x)\n") == WrappedNames()


def test_calls_that_may_go_through_a_wrapped_object() -> None:
    wrapped = found(SOURCE)
    assert uses_wrapped(call("self.model(x)"), wrapped)
    assert uses_wrapped(call("model.backward(loss)"), wrapped)
    assert uses_wrapped(call("DDP(net)"), wrapped)
    assert not uses_wrapped(call("print(x)"), wrapped)
    assert not uses_wrapped(call("self.optimizer.step()"), wrapped)
