"""Stage `declared_types`: what annotations say of a value being None."""

from __future__ import annotations

import ast
import gc
import textwrap
import weakref

import pytest

from collcheck.static.declared_types import (
    annotation_excludes_none,
    declared_element,
    declared_entry,
    element_annotation,
    elements_never_none,
    made_never_none,
)
from collcheck.static.group_values import NOT_NONE, none_or_not
from collcheck.static.state import Frame
from collcheck.static.symbolic import Atom, Const, Expr, Maker, Nullness

from .conftest import function, module_of

MODULE = ast.parse(
    textwrap.dedent(
        """
        from typing import Optional, TypeVar, NewType
        T = TypeVar("T")
        UserId = NewType("UserId", int)
        MaybeStore = Optional["Store"]
        Stores = list["Store"]
        class Store: ...
        """
    )
)


def _annotation(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


@pytest.mark.parametrize(
    "text",
    [
        "Store",
        "int",
        "'Store'",
        "list[Optional[Store]]",  # the list itself is no None
        "Union[Store, int]",
        "Store | int",
        "Annotated[Store, 'meta']",
        "Literal['a', 'b']",
        "Callable[..., Store]",
        "UserId",
        "typing.Sequence[int]",
    ],
)
def test_annotations_that_exclude_none(text: str) -> None:
    assert annotation_excludes_none(_annotation(text), MODULE)


@pytest.mark.parametrize(
    "text",
    [
        "Optional[Store]",
        "typing.Optional[Store]",
        "Store | None",
        "'Store | None'",
        "Union[Store, None]",
        "Any",
        "object",
        "None",
        "T",  # a type variable of the file
        "MaybeStore",  # an alias of the file for an Optional type
        "Annotated[Optional[Store], 'meta']",
        "Literal['a', None]",
        "'not an annotation ('",
    ],
)
def test_annotations_that_admit_none(text: str) -> None:
    assert not annotation_excludes_none(_annotation(text), MODULE)


def test_element_types_of_containers() -> None:
    def elements(text: str) -> list[str] | None:
        found = element_annotation(_annotation(text), MODULE)
        return None if found is None else [ast.unparse(e) for e in found]

    assert elements("Sequence[Store]") == ["Store"]
    assert elements("tuple[Store, ...]") == ["Store"]
    assert elements("tuple[Store, Optional[int]]") == ["Store", "Optional[int]"]
    assert elements("dict[str, Optional[Store]]") == ["str"]  # iterating a mapping: its keys
    assert elements("Optional[list[Store]]") == ["Store"]  # iterating None fails before binding
    assert elements("Stores") == ["'Store'"]  # an alias of the file
    assert elements("Store") is None and elements("Callable[[int], Store]") is None


def _function(source: str) -> ast.FunctionDef:
    tree = ast.parse(textwrap.dedent(source))
    function = tree.body[-1]
    assert isinstance(function, ast.FunctionDef)
    return function


def _loop_iter(function: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.expr:
    loop = next(node for node in ast.walk(function) if isinstance(node, ast.For))
    return loop.iter


@pytest.mark.parametrize(
    ("source", "never"),
    [
        ("def f(xs: Sequence[Store]):\n    for x in xs: pass", True),
        ("def f(xs: Sequence[Optional[Store]]):\n    for x in xs: pass", False),
        ("def f(xs: Sequence[Store]):\n    ys = list(xs)\n    ys.append(y)\n    for x in ys: pass", True),
        ("def f(xs: Sequence[Store]):\n    for x in sorted(xs, key=id): pass", True),
        (
            "def f(xs: Sequence[Store]):\n    ys: list[Optional[Store]] = list(xs)\n    for x in ys: pass",
            False,
        ),
        ("def f(xs: Sequence[Store]):\n    xs = load()\n    for x in xs: pass", False),  # rebound
        ("def f(xs: Sequence[Store]):\n    ys = list(xs)\n    ys = other()\n    for x in ys: pass", False),
        ("def f(a: Store, b: Store):\n    for x in [a, b, 'c']: pass", True),
        ("def f(a: Store, b: Store = None):\n    for x in [a, b]: pass", False),
        ("def f(a: Store, b: Store):\n    for x in [a, None]: pass", False),
        ("def f(xs: Sequence[Store]):\n    for x in [*xs]: pass", True),
        ("def f():\n    for x in xs: pass", False),  # a global: bound out of sight
        ("def f(xs):\n    for x in xs: pass", False),
        ("def f(xs: Sequence[Store]):\n    list = g\n    for x in list(xs): pass", False),  # shadowed
        ("def f(xs: Sequence[Store]):\n    for xs in other(): pass\n    for x in xs: pass", False),
    ],
)
def test_loops_that_bind_no_none(source: str, never: bool) -> None:
    function = _function(source)
    loops = [node for node in ast.walk(function) if isinstance(node, ast.For)]
    assert elements_never_none(loops[-1].iter, function, MODULE) is never


def test_a_loop_element_is_marked_and_an_is_none_test_on_it_is_false() -> None:
    module = module_of(
        "from typing import Sequence\nclass Store: ...\ndef f(xs: Sequence[Store]):\n    for x in xs: pass\n"
    )
    f = function(module, "f")
    frame = Frame("f", None, (), 0, (f,))
    element = declared_element(Atom("item@2:4", "shared"), _loop_iter(f), frame, module)
    assert isinstance(element, Atom) and element.nullness is Nullness.NEVER
    assert none_or_not(element) == NOT_NONE
    # Only an unknown value is marked (not a constant); outside a function nothing is declared.
    constant: Expr = Const(None)
    assert declared_element(constant, _loop_iter(f), frame, module) == constant
    unmarked = declared_element(
        Atom("item@2:4", "shared"), _loop_iter(f), Frame("f", None, (), 0, ()), module
    )
    assert none_or_not(unmarked) == unmarked


def test_a_loop_over_an_attribute_its_class_declares() -> None:
    module = module_of(
        """
        from typing import Optional
        class Store: ...
        class Base:
            inherited: list[Store]
        class Pool(Base):
            spares: "tuple[Store, ...]"
            def __init__(self, stores):
                self.stores: list[Store] = list(stores)
                self.maybe: list[Optional[Store]] = []
                self.untyped = list(stores)
            def each(self, other):
                for x in self.stores: pass
                for x in self.spares: pass
                for x in self.inherited: pass
                for x in self.maybe: pass
                for x in self.untyped: pass
                for x in other.stores: pass
        """
    )
    each = function(module, "Pool.each")
    frame = Frame("Pool.each", "Pool", (), 0, (each,))
    loops = [node for node in each.body if isinstance(node, ast.For)]
    marked = [
        none_or_not(declared_element(Atom("item", "shared"), loop.iter, frame, module)) == NOT_NONE
        for loop in loops
    ]
    assert marked == [True, True, True, False, False, False]


def test_parameters_at_entry() -> None:
    function = _function(
        "def f(a: Store, b: Optional[Store], c: Store = None, d=None, e: Store = DEFAULT, *, k: int): pass"
    )
    passed: dict[str, Expr] = {name: Atom(f"param:{name}", "shared") for name in "abcdek"}
    passed["e"] = Const(None)  # a caller that passes None keeps its None
    env = declared_entry(function, dict(passed), MODULE)
    nullness = {name: value.nullness for name, value in env.items() if isinstance(value, Atom)}
    assert nullness == {
        "a": Nullness.NEVER,
        "b": Nullness.MAYBE,
        "c": Nullness.MAYBE,
        "d": Nullness.MAYBE,
        "k": Nullness.NEVER,
    }
    assert env["e"] == Const(None)
    # A value its caller declared maybe-None stays so when handed on to a parameter declared Store.
    handed = {"a": env["b"], "b": env["a"]}
    again = declared_entry(function, handed, MODULE)
    assert again["a"] == env["b"] and again["b"] == env["a"]
    # An undeclared parameter keeps an undeclared value as it is.
    untyped = _function("def g(x): pass")
    undeclared = {"x": Atom("param:x", "shared")}
    assert declared_entry(untyped, dict(undeclared), MODULE) == undeclared


def test_what_made_a_value_decides_whether_it_can_be_none() -> None:
    module = module_of(
        """
        from typing import Optional
        class Store: ...
        def opened() -> Store: ...
        def maybe() -> Optional[Store]: ...
        def undeclared(): ...
        """
    )

    def made_by(name: str, nullness: Nullness = Nullness.UNDECLARED) -> Atom:
        return Atom(f"call:{name}()", "shared", nullness=nullness, maker=Maker(name, module.path))

    assert made_never_none(made_by("Store"), module)  # calling a class makes one of its objects
    assert made_never_none(made_by("opened"), module)
    assert not made_never_none(made_by("maybe"), module)
    assert not made_never_none(made_by("undeclared"), module)
    assert not made_never_none(made_by("os.getcwd"), module)  # nothing of the run
    assert not made_never_none(Atom("call:Store()", "shared"), module)  # no maker known
    # Handed to a parameter declared Optional (maybe-None there), it is still what made it.
    assert made_never_none(made_by("Store", Nullness.MAYBE), module)
    assert none_or_not(made_by("Store"), module) == NOT_NONE
    assert none_or_not(made_by("Store")) == made_by("Store")  # no module: nothing to ask


def test_memos_keep_no_tree_alive() -> None:
    """What an annotation names is read from the module's and the function's bindings, memoised
    per tree and per function: the memo must not keep a tree alive after its file's model is
    dropped (an lru_cache keyed on trees held 256 of them: +440 MB on torch/distributed -j 2)."""
    source = "Alias = int\n\ndef f(x: Alias) -> Alias:\n    for y in x:\n        pass\n    return x\n"
    tree = ast.parse(source)
    func = tree.body[1]
    assert isinstance(func, ast.FunctionDef)
    assert annotation_excludes_none(func.args.args[0].annotation, tree)
    elements_never_none(ast.Name("x"), func, tree)
    dropped = weakref.ref(tree)
    del tree, func
    gc.collect()
    assert dropped() is None
