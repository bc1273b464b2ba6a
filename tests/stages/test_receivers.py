"""Stage `receivers`: objects of the file's classes. What calling an object runs (`call_method`),
which class a parameter's use fits (`used_object`), what a method reads of its object
(`own_attributes_read`), and what a call passes for a parameter (`passed_argument`,
`bound_once`). Dispatch, factories, annotations and agreeing callers are in
tests/test_object_receivers.py."""

from __future__ import annotations

from collcheck.static.receivers import (
    ObjectClass,
    bound_once,
    call_method,
    object_class,
    own_attributes_read,
    passed_argument,
    used_object,
)

from .conftest import call, module_of

SNIPPET = """
class Layer(torch.nn.Module):
    def forward(self, x):
        dist.all_reduce(x)
class Hook:
    def __call__(self, t):
        dist.barrier()
class Saver:
    def flush(self, t):
        return self.pending and self.rank
    def close(self):
        pass
class Other:
    def flush(self, t):
        pass
def finish(saver, t):
    saver.flush(t)
    saver.close()
def one_use(saver, t):
    saver.flush(t)
def setup():
    s = Saver()
    s = Saver()
    h = Hook()
    return h
"""


def test_calling_an_object_runs_its_call_method_or_a_torch_modules_forward() -> None:
    module = module_of(SNIPPET)
    hook = call_method(module, ObjectClass("Hook", True), frozenset())
    assert hook is module.classes["Hook"].methods["__call__"]
    layer = call_method(module, ObjectClass("Layer", True), frozenset({"torch.nn.Module"}))
    assert layer is module.classes["Layer"].methods["forward"]
    assert call_method(module, ObjectClass("Layer", True), frozenset()) is None  # not known as a module
    assert call_method(module, ObjectClass("Saver", True), frozenset({"torch.nn.Module"})) is None


def test_a_parameters_use_names_the_one_class_that_fits() -> None:
    module = module_of(SNIPPET)
    found = used_object(module, module.functions["finish"], "saver")  # flush and close: only Saver
    assert found is not None and object_class(module, found) == ObjectClass("Saver", False)
    assert used_object(module, module.functions["one_use"], "saver") is None  # one attribute says too little
    assert used_object(module, module.functions["finish"], "t") is None


def test_what_a_method_reads_of_its_own_object() -> None:
    module = module_of(SNIPPET)
    assert own_attributes_read(module.classes["Saver"].methods["flush"]) == {"pending", "rank"}
    assert own_attributes_read(module.classes["Saver"].methods["close"]) == frozenset()


def test_the_argument_a_call_passes_for_a_parameter() -> None:
    params = ["saver", "t"]
    assert passed_argument(call("finish(a, b)"), params, "t") is not None
    keyword = passed_argument(call("finish(a, t=b)"), params, "t")
    assert keyword is not None and getattr(keyword, "id", None) == "b"
    assert passed_argument(call("finish(*rest)"), params, "t") is None  # not known
    assert passed_argument(call("finish(a)"), params, "t") is None  # not passed


def test_a_name_bound_once_in_a_function() -> None:
    module = module_of(SNIPPET)
    setup = module.functions["setup"]
    assert bound_once(setup, "h") is not None
    assert bound_once(setup, "s") is None  # bound twice
    assert bound_once(None, "h") is None
