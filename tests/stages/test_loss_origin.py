"""loss_origin: whether a differentiated value can carry a graph through a model made elsewhere."""

from __future__ import annotations

import ast

import pytest

from collcheck.static.loss_origin import from_outside_model
from collcheck.static.names import ImportTable

IMPORTS = ImportTable({"torch": "torch", "nn": "torch.nn"})


def _answer(source: str, own: str | None = None) -> bool:
    tree = ast.parse(source)
    function = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef))
    classes = frozenset(node.name for node in tree.body if isinstance(node, ast.ClassDef))
    last = function.body[-1]
    assert isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
    func = last.value.func
    assert isinstance(func, ast.Attribute)
    return from_outside_model(func.value, function, IMPORTS, classes, own)


@pytest.mark.parametrize(
    "source",
    [
        "def f(model, x):\n    loss = model(x).sum()\n    loss.backward()",
        "def f(x):\n    loss = model(x).mean()\n    loss.backward()",  # a global model
        "def f(cfg, x):\n    net = build(cfg).to('cpu')\n    net(x).sum().backward()",
        "class T:\n    def f(self, x):\n        loss = self.compute(x)\n        loss.backward()",
        "def f(model, x):\n    out = model(x)\n    for item in out:\n        total = item.sum()\n"
        "    total.backward()",
    ],
)
def test_a_graph_through_a_model_made_elsewhere(source: str) -> None:
    assert _answer(source, own="self" if source.startswith("class") else None)


@pytest.mark.parametrize(
    "source",
    [
        "def f(x):\n    probe = torch.nn.Linear(4, 2).to('cpu')\n    probe(x).sum().backward()",
        "def f(x):\n    x = x.clone().requires_grad_(True)\n    (x * x).sum().backward()",
        "def f(model, x):\n    feats = model(x).detach()\n    w = torch.zeros(4, requires_grad=True)\n"
        "    (feats @ w).sum().backward()",
        "def f(model, x):\n    with torch.no_grad():\n        feats = model(x)\n"
        "    (feats * 2).sum().backward()",
        "class Layer:\n    pass\n\ndef f(x):\n    layer = Layer()\n    layer(x).sum().backward()",
    ],
)
def test_a_graph_made_here_only(source: str) -> None:
    assert not _answer(source)
