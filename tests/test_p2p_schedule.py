"""Simulated point-to-point schedules (collcheck/static/p2p_schedule.py) and the filtered-list
lengths they count with (collcheck/static/comprehensions.py): the matcher alone on hand-made
schedules, the evaluator of values as numbers, and whole files through the engine."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from collcheck.api import check_paths
from collcheck.catalog import load_catalog
from collcheck.config import load_settings
from collcheck.findings import Finding
from collcheck.static.loader import build_module
from collcheck.static.p2p_schedule import Call, run, shown_counts
from collcheck.static.program import CommEvent, EventKind
from collcheck.static.state import Frame, State
from collcheck.static.symbolic import (
    RANK,
    WORLD,
    Atom,
    BinOp,
    BoolOp,
    Compare,
    Const,
    Expr,
    Sized,
    fold,
    is_rank_dependent,
)
from collcheck.static.values import ValueEvaluator

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _send(peer: int, line: int = 1) -> Call:
    return CommEvent("send", EventKind.P2P_SEND, "f.py", line, 0, line, 0), peer


def _recv(peer: int, line: int = 2) -> Call:
    return CommEvent("recv", EventKind.P2P_RECV, "f.py", line, 0, line, 0), peer


def test_matched_exchanges_finish() -> None:
    heads, stuck = run([[_send(1), _recv(1)], [_recv(0), _send(0)]])
    assert stuck is None and heads == [2, 2]


def test_two_ranks_that_both_send_first_wait_on_each_other() -> None:
    heads, stuck = run([[_send(1), _recv(1)], [_send(0), _recv(0)]])
    assert stuck is not None and stuck.ranks == (0, 1) and stuck.finished is None
    assert heads == [0, 0]


def test_a_wait_that_opens_after_some_calls_matched() -> None:
    # 1F1B's steady phase: one forward already passed, then both stages send to each other.
    _, stuck = run([[_send(1), _send(1), _recv(1)], [_recv(0), _send(0), _recv(0)]])
    assert stuck is not None and set(stuck.ranks) == {0, 1}


def test_a_cycle_through_three_ranks() -> None:
    schedules = [
        [_send(2), _send(1)],  # rank 0: the targets to the last rank first
        [_recv(0), _send(2)],
        [_recv(1), _recv(0)],  # the last rank: activations from rank 1 first
    ]
    heads, stuck = run(schedules)
    assert stuck is not None and stuck.ranks == (0, 2, 1) and heads == [0, 0, 0]
    assert stuck.edges() == [(0, 2), (2, 1), (1, 0)]


def test_more_sends_than_receives_leave_the_sender_waiting_on_a_finished_rank() -> None:
    heads, stuck = run([[_send(1), _send(1), _send(1)], [_recv(0), _recv(0)]])
    assert stuck is not None and stuck.ranks == (0,) and stuck.finished == 1
    assert heads == [2, 2]


def test_shared_counts_are_shown_with_the_predicate_of_a_filtered_list() -> None:
    shown = dict(shown_counts({Atom("len:filter(params|_.requires_grad)", "shared"): 4}))
    assert shown == {"assumed len([... for _ in params if _.requires_grad])": "4"}


# ----------------------------------------------------------------------------- values as numbers


def test_values_as_numbers_decide_what_the_rank_and_world_fix() -> None:
    from collcheck.static.p2p_schedule import _Numbers

    numbers = _Numbers(1, 4, {Atom("len(items)", "shared"): 5})
    last = Compare("==", RANK, BinOp("-", WORLD, Const(1)))
    assert numbers.truth(last) is False
    assert numbers.integer(BinOp("min", BinOp("-", WORLD, RANK), Atom("len(items)", "shared"))) == 3
    unknown = Atom("flag", "shared")
    assert numbers.truth(unknown) is None
    # Three-valued: a decided operand settles `or`/`and` whatever the undecided one is.
    assert numbers.truth(BoolOp("or", (unknown, Compare("==", RANK, Const(1))))) is True
    assert numbers.truth(BoolOp("and", (unknown, Compare("==", RANK, Const(0))))) is False
    assert numbers.truth(BoolOp("and", (unknown, Compare("==", RANK, Const(1))))) is None
    assert numbers.truth(BinOp("//", RANK, Const(0))) is None


# ----------------------------------------------------------------------------- filtered lists


def _value(text: str) -> Expr:
    module = build_module(
        ast.parse("import torch\nimport torch.distributed as dist\n"), "m.py", load_catalog()
    )
    evaluator = ValueEvaluator(module)
    state = State({"params": Atom("param:params", "shared"), "rank": RANK})
    return evaluator.pure(ast.parse(text, mode="eval").body, state, Frame("f", None, (), 0, ()))


def test_one_list_filtered_by_one_predicate_has_one_length_wherever_it_is_written() -> None:
    sent = _value("[p.grad for p in params if p.requires_grad]")
    received = _value("[torch.empty_like(q) for q in params if q.requires_grad]")
    assert isinstance(sent, Sized) and isinstance(received, Sized)
    assert sent.length == received.length
    assert isinstance(sent.length, Atom) and sent.length.kind == "shared"


def test_different_predicates_give_different_lengths() -> None:
    sent = _value("[p.grad for p in params if p.requires_grad]")
    received = _value("[p for p in params if p is not None]")
    assert isinstance(sent, Sized) and isinstance(received, Sized)
    assert sent.length != received.length


@pytest.mark.parametrize(
    "text",
    [
        "[p for p in params if p.owner == rank]",  # a per-rank predicate: as before, opaque
        "[r for r in range(8) if r % 2 == 0]",  # a rank list: as before
    ],
)
def test_other_comprehensions_keep_their_opaque_value(text: str) -> None:
    value = _value(text)
    assert isinstance(value, Atom) and value.name.startswith("listcomp@")


def test_an_unfiltered_comprehension_is_as_long_as_what_it_iterates() -> None:
    mapped = _value("[p.grad for p in params]")
    assert isinstance(mapped, Sized) and mapped.length == _value("len(params)")
    noise = _value("[torch.randn(3) for _ in range(4)]")  # random entries, four of them
    assert isinstance(noise, Sized) and fold(noise.length) == Const(4)
    assert isinstance(noise.content, Atom) and noise.content.kind == "nondet"
    per_rank = _value("[torch.randn(3) for _ in range(rank + 1)]")
    assert isinstance(per_rank, Sized) and is_rank_dependent(per_rank.length)


# ----------------------------------------------------------------------------- through the engine


def _findings(unit: Path, **overrides: object) -> list[Finding]:
    settings = load_settings([unit]).with_overrides(jobs=1, cache=False, project_context=False, **overrides)
    result = check_paths([unit], settings)
    assert not result.errors, result.errors
    return result.findings


def test_the_three_rank_cycle_names_every_rank_and_needs_three_ranks() -> None:
    unit = FIXTURES / "reports" / "pipeline_target_send_first_bug.py"
    (finding,) = _findings(unit)
    assert finding.code == "CC005" and finding.location.line == 14
    example = finding.counterexample
    assert example is not None and example.world_size == 3
    assert [rank for rank, _ in example.ranks] == [0, 1, 2]
    waits = {rank: steps[-1].detail for rank, steps in example.ranks}
    assert waits == {
        0: "target; to rank 2, waits here",
        1: "act; from rank 0, waits here",
        2: "act; from rank 1, waits here",
    }
    assert _findings(unit, world_size=2) == []  # two ranks never close that cycle
    assert len(_findings(unit, world_size=4)) == 1


def test_a_receive_answered_by_an_irecv_elsewhere_in_the_file_is_not_reported(tmp_path: Path) -> None:
    source = FIXTURES / "CC005" / "one_f_one_b_helpers_bug.py"
    unit = tmp_path / "schedule.py"
    # The same buggy schedule, but the file also posts non-blocking calls somewhere: the
    # simulation cannot see what they answer, so it reports nothing.
    unit.write_text(source.read_text() + "\n\ndef unused(t):\n    return dist.irecv(t, src=0)\n")
    assert _findings(unit) == []


def test_a_peer_from_a_table_is_not_simulated(tmp_path: Path) -> None:
    unit = tmp_path / "table.py"
    unit.write_text(
        "import torch.distributed as dist\n\n"
        "def step(t, table):\n"
        "    rank = dist.get_rank()\n"
        "    peer = table[rank]\n"
        "    if rank == 0:\n"
        "        dist.send(t, dst=2)\n"
        "    dist.recv(t, src=peer)\n"
        "    dist.send(t, dst=peer)\n"
    )
    assert _findings(unit) == []


def test_a_schedule_chosen_by_data_is_not_simulated(tmp_path: Path) -> None:
    # The three-rank cycle happens only when `targets_first` holds; collcheck does not know it does.
    source = (FIXTURES / "reports" / "pipeline_target_send_first_bug.py").read_text()
    chosen = source.replace(
        "def pipeline_step(stage_module, batch, act_shape, target_shape):",
        "def pipeline_step(stage_module, batch, act_shape, target_shape, targets_first):",
    ).replace(
        "        dist.send(target, dst=last)  # expect: CC005\n        dist.send(stage_module(x), dst=1)\n",
        "        if targets_first:\n"
        "            dist.send(target, dst=last)\n"
        "            dist.send(stage_module(x), dst=1)\n"
        "        else:\n"
        "            dist.send(stage_module(x), dst=1)\n"
        "            dist.send(target, dst=last)\n",
    )
    assert chosen.count("targets_first") == 2
    unit = tmp_path / "chosen.py"
    unit.write_text(chosen)
    assert _findings(unit) == []


def test_a_clean_simulation_overrules_the_pairwise_search(monkeypatch: pytest.MonkeyPatch) -> None:
    # The parity-ordered 1F1B: the pairwise search compares one steady iteration of rank 0 with
    # the last one of rank 1 (`if i == num_remaining - 1`) and sees both send first; run rank by
    # rank, iteration by iteration with `i` bound, every call matches.
    unit = FIXTURES / "CC005" / "one_f_one_b_combined_fixed.py"
    assert _findings(unit) == []
    from collcheck.static import p2p_schedule

    monkeypatch.setattr(p2p_schedule, "_counts_from_zero", lambda loop: False)
    assert [f.code for f in _findings(unit)] == ["CC005"]  # `i` unbound: not simulated, pairwise


# ----------------------------------------------------------------------------- groups as the world


def test_a_group_simulated_as_the_world_gives_its_local_ranks_and_members_numbers() -> None:
    from collcheck.static import groups
    from collcheck.static.p2p_schedule import _Numbers

    me, size = groups.local_rank("pp"), groups.group_size("pp")
    following = groups.member_at("pp", BinOp("%", BinOp("+", me, Const(1)), size))
    preceding = groups.member_at("pp", BinOp("-", me, Const(1)))  # `ranks[me - 1]`: -1 is the last
    beyond = groups.member_at("pp", BinOp("+", me, Const(1)))  # an IndexError on the last member
    on_axis = _Numbers(2, 3, {}, axis="pp")
    assert on_axis.integer(following) == 0 and on_axis.integer(preceding) == 1
    assert on_axis.integer(groups.global_rank_of("pp", -1)) == 2
    assert on_axis.truth(Compare("==", beyond, Const(0))) is None
    # Another group, or none simulated: its values stay undecided.
    assert _Numbers(2, 3, {}, axis="tp").truth(Compare("==", me, Const(2))) is None
    assert _Numbers(2, 3, {}).truth(Compare("==", following, Const(0))) is None


def test_a_member_at_a_constant_local_rank_stays_a_listed_member() -> None:
    from collcheck.static import groups

    assert groups.member_at("pp", Const(1)) == groups.global_rank_of("pp", 1)
    computed = groups.member_at("pp", groups.local_rank("pp"))
    assert isinstance(computed, groups.MemberAt) and computed.kind == "perrank"
    assert not groups.is_listed_member(computed)  # the pairwise search does not read it as a peer


def test_group_rings_are_simulated_on_the_group_and_say_so(tmp_path: Path) -> None:
    unit = FIXTURES / "semantics" / "group_rings" / "global_rank_ring_bug.py"
    (finding,) = _findings(unit)
    example = finding.counterexample
    assert finding.code == "CC005" and example is not None and example.world_size == 2
    assert ("assumed members of stage_group", "every rank, local rank = rank") in example.values
    # Without the group's local rank the peers are opaque: no ring to simulate.
    opaque = tmp_path / "opaque.py"
    opaque.write_text(
        unit.read_text().replace("(me + 1) % count", "table[me]").replace("(me - 1) % count", "table[me]")
    )
    assert _findings(opaque) == []


def test_a_coordinators_size_is_read_only_from_an_object_whose_group_rank_is_read() -> None:
    module = build_module(
        ast.parse("import torch.distributed as dist\nplace = link.rank_in_group\n"), "m.py", load_catalog()
    )
    evaluator = ValueEvaluator(module)
    state = State({})
    frame = Frame("f", None, (), 0, ())

    def value(text: str) -> Expr:
        return evaluator.pure(ast.parse(text, mode="eval").body, state, frame)

    assert str(value("link.world_size")).startswith("group_world:")
    assert str(value("link.ranks")).startswith("group_ranks:")
    assert str(value("args.world_size")) == "world"  # the generic attribute: the world's size
    assert not str(value("args.ranks")).startswith("group_ranks:")


def test_a_group_whose_members_are_listed_is_not_taken_to_span_the_world(tmp_path: Path) -> None:
    ring = (
        "import torch\nimport torch.distributed as dist\n\n"
        "def ring(t, g):\n"
        "    me, n = dist.get_rank(g), dist.get_world_size(g)\n"
        "    out = torch.empty_like(t)\n"
        "    dist.send(t, group_dst=(me + 1) % n, group=g)\n"
        "    dist.recv(out, group_src=(me - 1) % n, group=g)\n"
    )
    handed = tmp_path / "handed.py"
    handed.write_text(ring)
    assert [f.code for f in _findings(handed)] == ["CC005"]
    listed = tmp_path / "listed.py"  # members 0..2 of a larger world: not simulated (no finding)
    listed.write_text(ring.replace("def ring(t, g):\n", "def ring(t):\n    g = dist.new_group([0, 1, 2])\n"))
    assert _findings(listed) == []
