"""Stage `prefilter`: does a text use communication as code? (`Trigger` from `trigger_pattern`)."""

from __future__ import annotations

import pytest

from collcheck.static.prefilter import Trigger, names_distributed_library, trigger_pattern

from .conftest import catalog

DIST = "import torch.distributed as dist\n"


@pytest.fixture(scope="module")
def trigger() -> Trigger:
    return trigger_pattern(catalog())


@pytest.mark.parametrize(
    "text",
    [
        "import torch.distributed as dist\ndist.all_reduce(t)\n",
        "from torch.distributed import all_reduce\n",
        "def f(g):\n    g.barrier()\n",
        "all_reduce (t)\n",  # a call with a space before the parenthesis
    ],
)
def test_a_distinctive_name_used_as_code_triggers(trigger: Trigger, text: str) -> None:
    assert trigger.search(text)
    assert trigger.positions(text)


@pytest.mark.parametrize(
    "text",
    [
        "# all_reduce is what the other file does\n",  # a word in a comment, not called
        "x = 'a barrier to entry'\n",
        "my_all_reduce_count = 3\n",  # inside another word
        "print('hello')\n",
    ],
)
def test_a_name_in_prose_or_inside_another_word_does_not(trigger: Trigger, text: str) -> None:
    assert not trigger.search(text)
    assert trigger.positions(text) == []


def test_a_plain_word_counts_only_beside_a_distributed_library(trigger: Trigger) -> None:
    plain = "def f(x):\n    return x.gather(0)\n"
    assert not trigger.search(plain)  # `gather` of some other library
    assert trigger.search("import torch.distributed\n" + plain)
    # the receivers whose `reduce` or `gather` are known not to communicate
    assert not trigger.search("import torch.distributed\nfunctools.reduce(f, xs)\ntorch.gather(t, 0, i)\n")


def test_positions_are_where_each_use_starts(trigger: Trigger) -> None:
    text = "import torch.distributed as dist\ndist.barrier()\n# barrier\ndist.all_reduce(x)\n"
    assert trigger.positions(text) == [text.index("barrier()"), text.index("all_reduce")]


def test_search_is_bounded_to_its_window(trigger: Trigger) -> None:
    text = "x = 1\n" * 5 + "dist.all_reduce(t)\n"
    start = text.index("dist")
    assert trigger.search(text, start)
    assert not trigger.search(text, 0, start)


@pytest.mark.parametrize(
    "text",
    [
        DIST + 'def f(loss):\n    """Calls `loss.backward()` first."""\n    return 1\n',
        DIST + "# dist.all_reduce(t) happens in the caller\nx = 1  # then .barrier()\n",
        DIST + "HELP = 'run model.backward() on every rank'\nTEXT = '''\ndist.barrier()\n'''\n",
        'import deepspeed\nNOTE = r"engine.backward(loss) \\" still in the string"\n',
    ],
)
def test_a_use_inside_a_comment_or_a_string_is_no_use(trigger: Trigger, text: str) -> None:
    """Prose that quotes code (a docstring's `loss.backward()`) in a file that names a distributed
    library is not code: the file does not communicate for it."""
    assert trigger.positions(text) == []
    assert not trigger.search(text)


def test_code_after_a_string_or_comment_still_counts(trigger: Trigger) -> None:
    text = (
        'import torch.distributed as dist\n"""dist.barrier() in prose"""\n'
        "x = '#'  # a hash in a string opens no comment\nloss.backward()\ndist.barrier()\n"
    )
    assert trigger.positions(text) == [text.index("backward()"), text.rindex("barrier()")]
    unclosed = "import torch.distributed as dist\ndist.barrier()\n'''never closed dist.barrier()\n"
    assert trigger.positions(unclosed) == [unclosed.index("barrier()")]


def test_library_markers() -> None:
    assert names_distributed_library("import deepspeed\n")
    assert not names_distributed_library("import numpy\n")
    assert names_distributed_library("self.accelerator.gather(x)", (".accelerator.",))


def test_the_trigger_is_built_once_per_catalog() -> None:
    assert trigger_pattern(catalog()) is trigger_pattern(catalog())
