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


# A resolver's `LocalData` reaches the resolver only weakly (no cycle keeps a module alive), so
# the tests keep the resolvers they read from.
_RESOLVERS: list[CallResolver] = []


def local_data() -> tuple[LocalData, ModuleInfo]:
    return module_data(SNIPPET)


def test_host_values_put_into_a_reduced_tensor_and_what_they_were_computed_from() -> None:
    data, module = local_data()
    function = module.functions["count_tokens"]
    assert data.names(function) == {"padded", "tokens", "batch"}
    how, line, _ = data.evidence[(function, "tokens")]
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
    how, _, _ = data.evidence[(caller, "ready")]
    assert how.startswith("passed to agree()")


def test_evidence_under_a_test_is_not_reached_from_every_earlier_statement() -> None:
    data, module = local_data()
    function = module.functions["later"]
    assert "mine" in data.names(function)
    assignment = function.body[0]
    _, line, _ = data.evidence[(function, "mine")]
    assert not data.reached_from(function, assignment, line)  # `agree` runs only where dp > 1
    straight = module.functions["count_tokens"]
    assert "tokens" in data.names(straight)  # computed on demand
    _, at, _ = data.evidence[(straight, "tokens")]
    assert data.reached_from(straight, straight.body[0], at)


PATHS = """
def padded(plan):
    sizes = torch.tensor([plan.num_tokens])
    dist.all_reduce(sizes, op=dist.ReduceOp.MAX)
def step(batch, dp):
    if dp > 1:
        padded(batch)
def slots(count, rank, world):
    counts = torch.zeros(world)
    counts[rank] = count
    dist.all_reduce(counts)
def sized(x):
    dist.all_reduce(torch.tensor([x.shape[0], x.numel()]))
def configured(group, t):
    dist.all_reduce(t, group=group)
def mixed(plan, reference):
    same = int(plan.total == reference.total)
    dist.all_reduce(torch.tensor([same]), op=dist.ReduceOp.MIN)
def listed(count, world):
    dist.all_reduce(torch.tensor([count, world * 2]))
def repeated(world, flag):
    dist.all_reduce(torch.tensor([flag] * world))
def polled(pollers, items):
    polls = poll_all(pollers)
    size = len(items)
    dist.all_reduce(torch.tensor([polls, size]))
class Stager:
    def publish(self):
        out = [None] * 2
        dist.all_gather_object(out, self.staged)
    def flush(self):
        self.publish()
"""


def test_an_attribute_path_of_a_parameter_is_handed_on_as_the_same_path_of_the_argument() -> None:
    data, module = module_data(PATHS)
    helper = module.functions["padded"]
    assert data.parameter_paths(helper) == (("plan.num_tokens", line_of(PATHS, "dist.all_reduce(sizes")),)
    caller = module.functions["step"]
    assert data.parameter_paths(caller) == (("batch.num_tokens", line_of(PATHS, "padded(batch)")),)
    how, _, _ = data.evidence[(caller, "batch.num_tokens")]
    assert how.startswith("passed to padded()")


def test_an_item_stored_into_a_tensor_that_is_then_reduced_is_evidence() -> None:
    data, module = module_data(PATHS)
    assert data.parameter_paths(module.functions["slots"]) == (
        ("count", line_of(PATHS, "dist.all_reduce(counts)")),
    )


def test_a_size_read_off_a_value_is_per_rank_data_of_that_value_and_a_group_is_none() -> None:
    data, module = module_data(PATHS)
    assert [path for path, _ in data.parameter_paths(module.functions["sized"])] == ["x"]
    assert data.parameter_paths(module.functions["configured"]) == ()


def test_an_attribute_of_self_combined_by_a_method_is_the_receivers_attribute_at_the_call() -> None:
    data, module = module_data(PATHS)
    methods = module.classes["Stager"].methods
    assert [path for path, _ in data.parameter_paths(methods["publish"])] == ["self.staged"]
    assert data.parameter_paths(methods["flush"]) == (("self.staged", line_of(PATHS, "self.publish()")),)


def module_data(snippet: str) -> tuple[LocalData, ModuleInfo]:
    module = module_of(snippet)
    _RESOLVERS.append(CallResolver(module))
    return _RESOLVERS[-1].local_data, module


def test_a_parameter_is_its_own_only_where_it_is_all_that_flows_into_what_is_combined() -> None:
    data, module = module_data(PATHS)
    mixed = module.functions["mixed"]
    assert {"plan.total", "reference.total"} <= data.names(mixed)  # evidence for the assignments
    assert data.parameter_paths(mixed) == ()  # either may be the same on every rank
    assert [path for path, _ in data.parameter_paths(module.functions["listed"])] == ["count", "world"]


def test_what_an_unknown_function_makes_of_a_parameter_does_not_make_it_own_but_its_size_does() -> None:
    data, module = module_data(PATHS)
    polled = module.functions["polled"]
    assert {"pollers", "items"} <= data.names(polled)
    assert [path for path, _ in data.parameter_paths(polled)] == ["items"]


def test_the_count_of_a_repeated_list_is_its_shape_not_its_contents() -> None:
    data, module = module_data(PATHS)
    assert [path for path, _ in data.parameter_paths(module.functions["repeated"])] == ["flag"]
