"""local_data.LocalData, the stage alone: which names are all that flows into what is combined
(`direct`), which bindings hold only what a collective delivered (`delivered`), and which modules
a function trains data-parallel by hand (`trained`), on small invented functions."""

from __future__ import annotations

import ast
import textwrap

from collcheck.catalog import OpSpec, load_catalog
from collcheck.static.local_data import FunctionNode, LocalData, combining_words, delivering_words

CATALOG = load_catalog()


def _functions(source: str) -> dict[str, FunctionNode]:
    tree = ast.parse(textwrap.dedent(source))
    return {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _data(functions: dict[str, FunctionNode]) -> LocalData:
    def called(func: ast.expr) -> str | None:
        text = ast.unparse(func)
        return "torch.distributed." + text.removeprefix("dist.") if text.startswith("dist.") else text

    def spec(call: ast.Call, _function: FunctionNode) -> OpSpec | None:
        name = called(call.func)
        return CATALOG.functions.get(name) if name is not None else None

    def helper(call: ast.Call, _function: FunctionNode) -> FunctionNode | None:
        return functions.get(call.func.id) if isinstance(call.func, ast.Name) else None

    specs = list(CATALOG.functions.items())
    return LocalData(spec, helper, called, combining_words(CATALOG.functions, ()), delivering_words(specs))


def test_a_value_mixed_with_others_is_not_direct_evidence() -> None:
    functions = _functions(
        """
        def f(batch, world, scale):
            n = len(batch)
            start = dist.get_rank() * world
            part = 1.0
            part /= scale
            total = 0
            total += n
            t = torch.tensor([total, start, part])
            dist.all_reduce(t)
        """
    )
    data = _data(functions)
    f = functions["f"]
    assert {"n", "total", "batch", "world", "scale"} <= data.names(f)
    assert data.direct(f, "n") and data.direct(f, "total") and data.direct(f, "batch")
    assert not data.direct(f, "world")  # beside the rank in an offset
    assert not data.direct(f, "scale")  # `part /= scale`: scales, one input of two


def test_what_a_collective_delivered_is_not_own() -> None:
    functions = _functions(
        """
        def f(mine, sizes):
            got = [None] * dist.get_world_size()
            dist.all_gather_object(got, mine)
            flat = [x for part in got for x in part]
            for name in flat:
                pass
            for name in mine:
                pass
            mixed = flat + sizes
            first = got[0]
            mine = got[dist.get_rank()]
        """
    )
    data = _data(functions)
    f = functions["f"]
    loops = [s for s in ast.walk(f) if isinstance(s, ast.For)]
    assigns = {
        s.targets[0].id: s
        for s in ast.walk(f)
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name)
    }
    assert data.delivered(f, assigns["flat"]) and data.delivered(f, loops[0])
    assert not data.delivered(f, loops[1])  # this rank's own names
    assert not data.delivered(f, assigns["mixed"])  # `sizes` was delivered by nothing
    assert not data.delivered(f, assigns["got"])  # above the collective
    assert data.delivered(f, assigns["first"])
    assert not data.delivered(f, assigns["mine"])  # this rank's entry: indexed by the rank


def test_modules_trained_by_hand() -> None:
    functions = _functions(
        """
        def sync(net):
            for _, p in net.named_parameters():
                dist.all_reduce(p.grad.data)

        def loop(model, other, ema):
            for p in model.parameters():
                dist.all_reduce(p.grad)
            for p in ema.parameters():
                dist.broadcast(p.data, src=0)
            sync(other)
        """
    )
    data = _data(functions)
    assert data.trained(functions["sync"]) == {"net"}
    assert data.trained(functions["loop"]) == {"model", "other"}  # not `ema`: broadcast, not combined


def test_a_whole_sequence_in_a_tensor_is_as_long_on_every_rank() -> None:
    functions = _functions(
        """
        def f(flags: List[int], votes, value, items):
            polls = [p.poll() for p in items]
            for v in votes:
                pass
            a = torch.tensor(flags)
            b = torch.tensor(votes)
            c = torch.tensor(value)
            d = torch.tensor(polls)
            e = torch.tensor([len(items)])
            dist.all_reduce(a)
            dist.all_reduce(b)
            dist.all_reduce(c)
            dist.all_reduce(d)
            dist.all_reduce(e)
        """
    )
    data = _data(functions)
    f = functions["f"]
    names = data.names(f)
    assert "value" in names and "items" in names  # a scalar; a length put into the tensor
    assert not {"flags", "votes", "polls"} & names  # whole sequences: only their entries differ


def test_evidence_keeps_the_lines_of_the_collectives_that_combine() -> None:
    functions = _functions(
        """
        def agree(n, group):
            if dist.get_world_size(group) > 1:
                t = torch.tensor([n])
                dist.all_reduce(t, group=group)
            return n

        def f(batch, group):
            count = len(batch)
            return agree(count, group)
        """
    )
    data = _data(functions)
    agree, f = functions["agree"], functions["f"]
    assert "n" in data.names(agree) and "count" in data.names(f)
    assert data.evidence[(agree, "n")][2] == frozenset({5})  # the all_reduce itself
    assert data.evidence[(f, "count")][1:] == (10, frozenset({5}))  # handed to `agree` at line 10
