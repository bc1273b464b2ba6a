"""Stage `calls`: the call resolver alone (`CallResolver.resolve` -> `Resolution`), and what it
knows of the file's functions (`returns_matter`, `body_communicates`, `handoff`). The kinds of
plain calls are in tests/test_stage_units.py; here: targets, receivers, partials, op specs."""

from __future__ import annotations

import pytest

from collcheck.static.calls import CallKind, CallResolver, Handoff, Resolution
from collcheck.static.receivers import object_value
from collcheck.static.state import State
from collcheck.static.symbolic import is_rank_dependent

from .conftest import call, expr, frame, module_of

SNIPPET = """
import functools
import sys
import deepspeed.comm as dscomm
class Syncer:
    def push(self, t):
        dist.all_reduce(t)
    def step(self, t):
        self.push(t)
def sync(t):
    dist.barrier()
def own_rank():
    return dist.get_rank()
def through(x):
    return own_rank()
def plain(x):
    return x + 1
def f(t):
    pass
"""


@pytest.fixture(scope="module")
def resolver() -> CallResolver:
    return CallResolver(module_of(SNIPPET, complete=True))


def resolve(resolver: CallResolver, text: str, state: State | None = None, where: str = "f") -> Resolution:
    module = resolver.module
    if "." in where:
        owner, name = where.split(".")
        here = frame(where, owner, module.classes[owner].methods[name])
    else:
        here = frame(where, None, module.functions[where])
    return resolver.resolve(call(text), here, state if state is not None else State({}))


@pytest.mark.parametrize(
    ("text", "op", "kind"),
    [
        ("dist.all_reduce(t, op=dist.ReduceOp.MAX)", "all_reduce", "collective"),
        ("dist.broadcast(t, src=0)", "broadcast", "collective"),
        ("dist.new_group([0, 1])", "new_group", "group_create"),
        ("dist.send(t, 1)", "send", "p2p_send"),
        ("dist.recv(t, 0)", "recv", "p2p_recv"),
        ("dist.isend(t, 1)", "isend", "p2p_nonblocking"),
        ("dscomm.all_reduce(t)", "all_reduce", "collective"),  # another library's, by its catalog
    ],
)
def test_collectives_carry_their_catalogued_spec(
    resolver: CallResolver, text: str, op: str, kind: str
) -> None:
    resolution = resolve(resolver, text)
    assert resolution.kind is CallKind.COLLECTIVE
    assert resolution.spec is not None and (resolution.spec.op, resolution.spec.kind) == (op, kind)
    assert resolution.target is None


@pytest.mark.parametrize("text", ["sys.exit(1)", "os._exit(0)", "exit()"])
def test_a_process_exit_is_an_exit_whatever_else_it_may_be(resolver: CallResolver, text: str) -> None:
    resolution = resolve(resolver, text)
    assert resolution.kind is CallKind.EXIT and resolution.spec is None and resolution.target is None


def test_a_function_of_the_file_is_a_helper_target_without_self(resolver: CallResolver) -> None:
    resolution = resolve(resolver, "sync(t)")
    assert resolution.kind is CallKind.HELPER and resolution.target is not None
    function, class_name, bound = resolution.target
    assert (function.name, class_name, bound) == ("sync", None, False)
    assert resolution.receiver is None and resolution.partial is None


def test_a_method_on_self_is_looked_up_in_the_frames_class(resolver: CallResolver) -> None:
    resolution = resolve(resolver, "self.push(t)", where="Syncer.step")
    assert resolution.target is not None
    function, class_name, bound = resolution.target
    assert (function.name, class_name, bound) == ("push", "Syncer", True)


def test_a_method_on_an_object_the_path_holds_names_its_receiver(resolver: CallResolver) -> None:
    held = State({"s": object_value(resolver.module, "Syncer", "here", True)})
    resolution = resolve(resolver, "s.push(t)", held)
    assert resolution.kind is CallKind.HELPER and resolution.receiver == "s"
    assert resolution.target is not None and resolution.target[0].name == "push"
    # The same call where nothing says what `s` is: unknown code.
    assert resolve(resolver, "s.push(t)").kind is CallKind.UNKNOWN


def test_calling_a_partial_runs_its_function_with_the_bound_arguments(resolver: CallResolver) -> None:
    state = State({})
    here = frame("f", None, resolver.module.functions["f"])
    state.env["p"] = resolver.pure(expr("functools.partial(sync, t)"), state, here)
    resolution = resolver.resolve(call("p()"), here, state)
    assert resolution.kind is CallKind.HELPER and resolution.partial is not None
    assert resolution.target is not None and resolution.target[0].name == "sync"
    assert len(resolution.partial.args) == 1


def test_a_handed_callable_names_the_collectives_it_may_issue(resolver: CallResolver) -> None:
    here = frame("f", None, resolver.module.functions["f"])
    assert resolver.handoff(call("pool.submit(sync)"), here) == Handoff(frozenset({"barrier"}))
    assert resolver.handoff(call("pool.submit(plain)"), here) is None
    assert Handoff(frozenset({"a"})).joined(Handoff(None)) == Handoff(None)


def test_what_the_resolver_knows_of_the_files_functions(resolver: CallResolver) -> None:
    functions = resolver.module.functions
    # Its return value may depend on the rank whatever the arguments: directly or through a helper.
    assert resolver.returns_matter(functions["own_rank"])
    assert resolver.returns_matter(functions["through"])
    assert not resolver.returns_matter(functions["plain"])
    assert resolver.body_communicates(functions["sync"])
    assert not resolver.body_communicates(functions["own_rank"])


def test_a_rank_decorator_is_a_condition_on_the_rank() -> None:
    module = module_of(
        """
        from lightning.pytorch.utilities import rank_zero_only
        @rank_zero_only
        def log():
            dist.barrier()
        def other():
            dist.barrier()
        """,
        complete=True,
    )
    resolver = CallResolver(module)
    condition = resolver.decorator_condition(module.functions["log"], module)
    assert condition is not None and is_rank_dependent(condition)
    assert resolver.decorator_condition(module.functions["other"], module) is None
