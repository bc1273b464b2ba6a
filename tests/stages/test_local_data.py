"""Stage `local_data`: per-rank data by the program's evidence — the names a function hands a
combining collective (or a helper that does), and backward the names computed into them
(`LocalData.names`, `evidence`, `parameters`, `combined_at`, `reached_from`)."""

from __future__ import annotations

from collcheck.static.calls import CallResolver
from collcheck.static.loader import ModuleInfo
from collcheck.static.local_data import LocalData

from .conftest import line_of, module_of

SNIPPET = """
def count_tokens(batch):
    tokens = len(batch)
    padded = tokens + 8
    t = torch.tensor([padded], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()
def activations(model, x):
    out = model(x)
    dist.all_reduce(out)
def gather_flags(done):
    flags = [None] * 4
    dist.all_gather_object(flags, done)
def agree(flag):
    dist.all_reduce(torch.tensor([flag]))
def caller(items, size):
    ready = len(items) > size
    agree(ready)
def later(flag, dp):
    mine = flag + 1
    if dp > 1:
        agree(mine)
def broadcasted(t):
    dist.broadcast(t, src=0)
"""


def local_data() -> tuple[LocalData, ModuleInfo]:
    module = module_of(SNIPPET)
    return CallResolver(module).local_data, module


def test_host_values_put_into_a_reduced_tensor_and_what_they_were_computed_from() -> None:
    data, module = local_data()
    function = module.functions["count_tokens"]
    assert data.names(function) == {"padded", "tokens", "batch"}
    how, line = data.evidence[(function, "tokens")]
    assert line == line_of(SNIPPET, "dist.all_reduce(t, op") and "all_reduce" in how
    assert data.combined_at(function, line) == ("batch", "padded", "tokens")


def test_a_tensor_handed_as_it_is_is_no_evidence_and_neither_is_a_non_combining_collective() -> None:
    data, module = local_data()
    assert data.names(module.functions["activations"]) == frozenset()
    assert data.names(module.functions["broadcasted"]) == frozenset()


def test_the_object_of_an_object_collective_is_this_ranks_own() -> None:
    data, module = local_data()
    assert data.names(module.functions["gather_flags"]) == {"done"}


def test_parameters_that_reach_a_combining_collective_make_the_callers_arguments_evidence() -> None:
    data, module = local_data()
    assert data.parameters(module.functions["agree"]) == ("flag",)
    caller = module.functions["caller"]
    assert data.names(caller) == {"ready", "items", "size"}
    how, _ = data.evidence[(caller, "ready")]
    assert how.startswith("passed to agree()")


def test_evidence_under_a_test_is_not_reached_from_every_earlier_statement() -> None:
    data, module = local_data()
    function = module.functions["later"]
    assert "mine" in data.names(function)
    assignment = function.body[0]
    _, line = data.evidence[(function, "mine")]
    assert not data.reached_from(function, assignment, line)  # `agree` runs only where dp > 1
    straight = module.functions["count_tokens"]
    assert "tokens" in data.names(straight)  # computed on demand
    _, at = data.evidence[(straight, "tokens")]
    assert data.reached_from(straight, straight.body[0], at)
