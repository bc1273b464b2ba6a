"""Stage `failures`: which calls may raise on one rank alone, and which handlers catch them."""

from __future__ import annotations

import ast

from collcheck.static.failures import always_raises, catches_broadly, may_fail_alone

PER_PROCESS = frozenset({"os.path.exists", "open"})


def _call(text: str) -> ast.Call:
    node = ast.parse(text).body[0]
    assert isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
    return node.value


def test_the_process_own_world_may_fail_alone() -> None:
    assert may_fail_alone(_call("future.result()"), None, False, PER_PROCESS)
    assert may_fail_alone(_call("launch()"), None, False, PER_PROCESS)
    assert may_fail_alone(_call("open(path)"), None, False, PER_PROCESS)
    assert may_fail_alone(_call("torch.save(s, p)"), "torch.save", False, PER_PROCESS)
    assert may_fail_alone(_call("shutil.rmtree(p)"), "shutil.rmtree", False, PER_PROCESS)
    assert may_fail_alone(_call("os.path.exists(p)"), "os.path.exists", False, PER_PROCESS)


def test_pure_calls_and_communication_fail_alike() -> None:
    assert not may_fail_alone(_call("len(xs)"), None, False, PER_PROCESS)
    assert not may_fail_alone(_call("xs.append(1)"), None, False, PER_PROCESS)
    assert not may_fail_alone(_call("logger.info('x')"), None, False, PER_PROCESS)
    assert not may_fail_alone(_call("t.item()"), None, False, PER_PROCESS)
    assert not may_fail_alone(_call("torch.zeros(3)"), "torch.zeros", False, PER_PROCESS)
    assert not may_fail_alone(_call("time.perf_counter()"), "time.perf_counter", False, PER_PROCESS)
    # A method of an unknown object or a library function fails on its inputs, alike everywhere.
    assert not may_fail_alone(_call("param.data.narrow(0, a, b)"), None, False, PER_PROCESS)
    assert not may_fail_alone(_call("lib.init_comm(rank, n)"), "lib.init_comm", False, PER_PROCESS)
    # A call handed a process group communicates: its failure is every member's.
    assert not may_fail_alone(_call("engine.sync(t, group=g)"), None, True, PER_PROCESS)


def _handler(text: str) -> ast.ExceptHandler:
    node = ast.parse(text).body[0]
    assert isinstance(node, ast.Try)
    return node.handlers[0]


def test_broad_handlers() -> None:
    assert catches_broadly(_handler("try:\n  f()\nexcept:\n  pass"), {})
    assert catches_broadly(_handler("try:\n  f()\nexcept Exception:\n  pass"), {})
    assert catches_broadly(_handler("try:\n  f()\nexcept (KeyError, BaseException):\n  pass"), {})
    assert catches_broadly(_handler("try:\n  f()\nexcept OSError:\n  pass"), {})
    assert not catches_broadly(_handler("try:\n  f()\nexcept ImportError:\n  pass"), {})
    assert not catches_broadly(_handler("try:\n  f()\nexcept NotImplementedError:\n  pass"), {})


def test_a_handler_that_always_raises_again() -> None:
    assert always_raises(_handler("try:\n  f()\nexcept Exception:\n  log()\n  raise").body)
    both = "try:\n  f()\nexcept Exception as e:\n  if a:\n    raise\n  else:\n    raise e"
    assert always_raises(_handler(both).body)
    assert not always_raises(_handler("try:\n  f()\nexcept Exception:\n  if a:\n    raise\n  x = 1").body)


def test_what_belongs_to_the_process_alone() -> None:
    # Files, futures and processes: a failure recorded from these differs between ranks.
    from collcheck.static.failures import touches_own_world

    assert touches_own_world(_call("open(p)"), None, PER_PROCESS)
    assert touches_own_world(_call("future.result()"), None, PER_PROCESS)
    assert touches_own_world(_call("shutil.rmtree(p)"), "shutil.rmtree", PER_PROCESS)
    assert touches_own_world(_call("out.write(s)"), None, PER_PROCESS)
    # A value computed by unknown code is, as every unknown call's result, the same everywhere.
    assert not touches_own_world(_call("run(choice)"), None, PER_PROCESS)
    assert not touches_own_world(_call("os.environ.get('X')"), "os.environ.get", PER_PROCESS)
    assert not touches_own_world(_call("json.loads(text)"), "json.loads", PER_PROCESS)
    assert not touches_own_world(_call("pickle.dumps(x)"), "pickle.dumps", PER_PROCESS)
