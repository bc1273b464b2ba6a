"""Stage `catalog_values`: the text of a catalog value (`rank`, `local_rank == 0`,
`group_rank[tp]`, `group_ranks[pp][-1]`) -> a symbolic value (`value_from_spec`)."""

from __future__ import annotations

from collcheck.static import groups
from collcheck.static.catalog_values import value_from_spec
from collcheck.static.symbolic import LOCAL_WORLD, RANK, WORLD, Atom, BinOp, BoolOp, Compare, Const


def test_plain_names() -> None:
    assert value_from_spec("rank", "here") == RANK
    assert value_from_spec("world", "here") == WORLD
    assert value_from_spec("local_rank", "here") == BinOp("%", RANK, LOCAL_WORLD)
    assert value_from_spec("node_rank", "here") == BinOp("//", RANK, LOCAL_WORLD)


def test_tests_over_them() -> None:
    assert value_from_spec("local_rank == 0", "here") == Compare(
        "==", BinOp("%", RANK, LOCAL_WORLD), Const(0)
    )
    assert value_from_spec("rank == 0 and world > 1", "here") == BoolOp(
        "and", (Compare("==", RANK, Const(0)), Compare(">", WORLD, Const(1)))
    )


def test_group_places_are_tied_to_the_catalog_group() -> None:
    assert value_from_spec("group_rank[tp]", "here") == groups.local_rank("tp")
    assert value_from_spec("group_world[tp]", "here") == groups.group_size("tp")
    assert value_from_spec("group_ranks[pp][-1]", "here") == groups.global_rank_of("pp", -1)
    anywhere = value_from_spec("group_rank", "a.py:3")
    assert isinstance(anywhere, Atom) and anywhere.kind == "perrank" and anywhere.name.endswith("a.py:3")


def test_text_that_does_not_parse_is_one_per_rank_unknown() -> None:
    broken = value_from_spec("rank ==", "here")
    assert isinstance(broken, Atom) and broken.kind == "perrank"
