"""Stage `tensor_shapes`: tensors built by a factory — their shape apart from their entries
(`factory_tensor` -> `Sized` with `dims`), and reads of that shape (`shape_read`,
`shape_attribute`)."""

from __future__ import annotations

from collcheck.static.state import State
from collcheck.static.symbolic import RANK, Atom, BinOp, Const, Sized, TupleVal, is_rank_dependent
from collcheck.static.tensor_shapes import factory_tensor, shape_attribute, shape_read
from collcheck.static.values import ValueEvaluator

from .conftest import call, expr, frame, module_of

RANDOM = Atom("random", "nondet", why="random numbers")


def test_a_factorys_arguments_are_the_shape_and_its_entries_are_apart() -> None:
    made = factory_tensor(
        "torch.randn", call("torch.randn(n, 3)"), [Atom("n", "shared"), Const(3)], {}, RANDOM, "1:0"
    )
    assert isinstance(made, Sized) and made.dims == (Atom("n", "shared"), Const(3))
    assert made.length == Atom("n", "shared") and made.content == RANDOM
    sized = factory_tensor(
        "torch.zeros", call("torch.zeros(size=s)"), [], {"size": TupleVal((RANK,))}, RANDOM, "1:0"
    )
    assert sized is not None and sized.dims == (RANK,)
    assert factory_tensor("torch.arange", call("torch.arange(4)"), [Const(4)], {}, RANDOM, "1:0") is None
    assert factory_tensor("torch.randn", call("torch.randn(*shape)"), [RANK], {}, RANDOM, "1:0") is None


def test_shape_reads_come_from_the_dims_alone() -> None:
    tensor = Sized("t", RANK, RANDOM, (RANK, Const(3)))
    assert shape_read("numel", tensor, []) == BinOp("*", RANK, Const(3))
    assert shape_read("size", tensor, [Const(-1)]) == Const(3)
    assert shape_read("size", tensor, []) == TupleVal((RANK, Const(3)))
    assert shape_read("dim", tensor, []) == Const(2)
    assert shape_read("size", tensor, [Const(5)]) is None
    assert shape_attribute("shape", tensor) == TupleVal((RANK, Const(3)))
    assert shape_attribute("ndim", tensor) == Const(2)
    assert shape_read("numel", Atom("x", "shared"), []) is None


def test_through_the_evaluator_random_entries_of_a_fixed_shape_have_a_fixed_size() -> None:
    evaluator = ValueEvaluator(module_of("def f():\n    pass\n", complete=True))
    state = State({"noise": evaluator.pure(expr("torch.randn(4, 2)"), State({}), frame())})
    size = evaluator.pure(expr("noise.numel()"), state, frame())
    assert not is_rank_dependent(size)
    state.env["part"] = evaluator.pure(expr("torch.zeros(dist.get_rank() + 1)"), State({}), frame())
    assert is_rank_dependent(evaluator.pure(expr("part.size(0)"), state, frame()))
