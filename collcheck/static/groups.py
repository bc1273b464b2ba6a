"""Process groups: the values that stand for a rank's place in a group, and what two members share.

Comes in: group keys (the `key` of a `GroupVal`: a catalog group name such as `tp`, a device-mesh
dimension such as `mesh['tp']`, or the text of the expression the code passes as `group=`) and the
atoms of path conditions. Goes out: the atoms for a rank's local rank in a group and the group's
size, a membership atom for `rank in ranks`, and the z3 facts that hold when two ranks are compared
on one group's channel.

Why unknown membership is still compared: SPMD code that passes a group around issues a collective
on it from every member. A group has at least two members, and the ranks that call with it are its
members, so a condition that splits two members (their local ranks, their global ranks, a per-rank
value) splits the group even when collcheck cannot say which global ranks it holds. What ties a
condition to the group's membership is stated, never guessed from names:

* the local rank of the group itself: members have distinct local ranks in [0, size);
* a membership test of the rank against a collection collcheck cannot see (`rank in self.ranks`)
  is taken to be the group's own membership test on a group of unknown members;
* catalog facts: a named group's members (Megatron's embedding group is the first and the last
  pipeline stage) and grids of orthogonal groups (two members of one tensor-parallel group share
  their pipeline and data-parallel positions); the dimensions of one device mesh are such a grid.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from collcheck.static.symbolic import Atom, Const, Expr, GroupVal, atoms

LOCAL_RANK_PREFIX = "group_rank:"
SIZE_PREFIX = "group_world:"
MEMBERSHIP_PREFIX = "member:"
RANKS_PREFIX = "group_ranks:"
GLOBAL_OF_PREFIX = "global_of:"
MEMBER_AT_PREFIX = "member_at:"
NO_INDEX = Const(None)
ANONYMOUS_LOCAL_RANK_PREFIX = "group_rank@"  # a catalog `group_rank` that names no group


def local_rank(key: str) -> Atom:
    """This rank's rank inside the group `key`. SPMD code asks for its rank in the groups it holds,
    so the rank is taken to be a member (a non-member's -1 is left out of the model: a test for it
    is then never true, which keeps `if dist.get_rank(g) < 0: return` quiet)."""
    return Atom(LOCAL_RANK_PREFIX + key, "perrank", lower=0, below_world=True)


def group_size(key: str) -> Atom:
    """The number of ranks of the group `key`: the same on every member."""
    return Atom(SIZE_PREFIX + key, "shared", lower=1)


def member_ranks(key: str) -> Atom:
    """`dist.get_process_group_ranks(group)`: the group's global ranks, in local-rank order. The
    same on every member of the group (`member_facts`), but a rank of another group of the same
    name holds another list (`new_group(ranks=get_process_group_ranks(tp_group))` is called with
    a different list on each tensor-parallel block); the world's list is the same everywhere."""
    return Atom(RANKS_PREFIX + key, "shared" if key == "world" else "perrank")


def is_listed_member(atom: Atom) -> bool:
    """`global_rank_of`: a group's member at a given local rank."""
    return atom.name.startswith(GLOBAL_OF_PREFIX)


def is_member_list(value: Expr) -> bool:
    return isinstance(value, Atom) and value.name.startswith(RANKS_PREFIX)


def global_rank_of(key: str, index: int) -> Atom:
    """`get_process_group_ranks(group)[index]`: the global rank of the member at that local rank;
    like the list, the same on the group's members and another one on a rank of another block."""
    return Atom(f"{GLOBAL_OF_PREFIX}{key}[{index}]", "shared" if key == "world" else "perrank")


@dataclass(frozen=True)
class MemberAt(Atom):
    """The global rank of the member of group `key` at a local rank computed from values
    (`get_global_rank(g, (me + 1) % n)`, `coordinator.ranks[(r + 1) % n]`, `group_dst=me + 1`).
    To z3 it is what any value computed from the rank is, an opaque per-rank number; the
    point-to-point simulation, which gives the group's members numbers, reads `index` there
    (p2p_schedule: a group simulated as an axis that spans the world)."""

    key: str = ""
    index: Expr = NO_INDEX


def member_at(key: str, index: Expr) -> Atom:
    """The member of group `key` at local rank `index`: `global_rank_of` for a constant index."""
    if isinstance(index, Const) and type(index.value) is int:
        return global_rank_of(key, index.value)
    return MemberAt(f"{MEMBER_AT_PREFIX}{key}[{index}]", "perrank", key=key, index=index)


def membership(container: str) -> Atom:
    """`rank in <container>` for a collection whose items collcheck cannot see."""
    return Atom(MEMBERSHIP_PREFIX + container, "perrank")


def unknown_group(key: str) -> GroupVal:
    """A group whose members collcheck cannot compute (a parameter, an attribute, a catalog group)."""
    return GroupVal(key, None)


def mesh_dimension_key(mesh: str, dimension: str | None) -> str:
    """One key for a device-mesh dimension, however it is reached: `mesh['tp'].get_group()`,
    `mesh.get_group('tp')`, `mesh.get_local_rank('tp')` and `mesh['tp'].get_local_rank()` agree."""
    # The same spelling as an item read from the mesh value (`item:<mesh>['tp']`, see the evaluator).
    return mesh if dimension is None else f"item:{mesh}[{dimension!r}]"


def _mesh_parts(key: str) -> tuple[str, str] | None:
    if not key.endswith("]") or "[" not in key:
        return None
    mesh, _, dimension = key[:-1].rpartition("[")
    return (mesh, dimension) if mesh else None


def _grid_peers(key: str, grids: Iterable[tuple[str, ...]]) -> set[str]:
    """Groups orthogonal to `key`: two members of `key` hold the same position in each of them."""
    peers: set[str] = set()
    for grid in grids:
        if key in grid:
            peers.update(other for other in grid if other != key)
    return peers


def atoms_of(values: Iterable[Expr]) -> frozenset[Atom]:
    """Every atom of some values (computed once per path, then asked many times)."""
    return frozenset(atom for value in values for atom in atoms(value))


def _local_rank_keys(found: frozenset[Atom]) -> set[str]:
    return {atom.name[len(LOCAL_RANK_PREFIX) :] for atom in found if atom.name.startswith(LOCAL_RANK_PREFIX)}


def _membership_atoms(found: frozenset[Atom]) -> set[Atom]:
    return {atom for atom in found if atom.name.startswith(MEMBERSHIP_PREFIX)}


def own_membership(atom: Atom, key: str) -> bool:
    """A membership atom that is the group `key`'s own test: against its rank list, or against a
    collection collcheck cannot see (taken to be the group's own test, see `member_facts`)."""
    if not atom.name.startswith(MEMBERSHIP_PREFIX):
        return False
    container = atom.name[len(MEMBERSHIP_PREFIX) :]
    return container == RANKS_PREFIX + key or not container.startswith(RANKS_PREFIX)


def is_interpreted(atom: Atom) -> bool:
    """A per-rank atom whose relation to the ranks collcheck knows: the rank, a local rank in a
    group, a membership test. Anything else per-rank is an opaque value computed from the rank."""
    return atom.kind == "rank" or atom.name.startswith(
        (LOCAL_RANK_PREFIX, MEMBERSHIP_PREFIX, ANONYMOUS_LOCAL_RANK_PREFIX)
    )


def opaque_rank_atoms(found: frozenset[Atom]) -> set[Atom]:
    return {atom for atom in found if atom.kind == "perrank" and not is_interpreted(atom)}


def shared_positions(key: str, mentioned: set[str], grids: Iterable[tuple[str, ...]]) -> set[str]:
    """The groups, among those whose local ranks the conditions mention, in which two members of
    `key` are known to hold the same position (same mesh, another dimension; or a catalog grid)."""
    same = _grid_peers(key, grids) & mentioned
    parts = _mesh_parts(key)
    if parts is not None:
        for other in mentioned:
            other_parts = _mesh_parts(other)
            if other_parts is not None and other_parts[0] == parts[0] and other_parts[1] != parts[1]:
                same.add(other)
    return same


def local_rank_bounds(tr: Any, found: frozenset[Atom]) -> list[Any]:
    """A local rank is below its group's size, on both ranks (a group of one has local rank 0);
    a rank is the member listed at index i of its group (or of the other rank's) exactly when its
    local rank is i; a listed member is a rank of the world."""
    facts = []
    listed = _listed_members(found)
    # Sorted: the order of z3's facts steers the model it picks, and counterexamples must not
    # depend on the process's hash seed.
    for key in sorted(_local_rank_keys(found) | {key for key, _ in listed}):
        size = tr.as_int(group_size(key), "a")
        for side in ("a", "b"):
            facts.append(tr.as_int(local_rank(key), side) < size)
    for key, index in sorted(listed):
        size = tr.as_int(group_size(key), "a")
        position = index if index >= 0 else size + index
        for side, other in (("a", "b"), ("b", "a")):
            member = tr.as_int(global_rank_of(key, index), side)
            facts.extend((member >= 0, member < tr.world))
            facts.append((tr.rank(side) == member) == (tr.as_int(local_rank(key), side) == position))
            # The other rank, if it is that member of this rank's group, holds that local rank in
            # it (a rank belongs to one group of each name).
            at = tr.as_int(local_rank(key), other) == position
            facts.append(tr.z3.Implies(tr.rank(other) == member, at))
    return facts


def spanning_facts(tr: Any, found: frozenset[Atom]) -> list[Any]:
    """A group as large as the world is the world's one group: its rank list, and each member
    read from it, is the same on both ranks (`size == world` is stated by an assertion on the
    path, asserted.py; without it a list stays per-rank, `member_ranks`)."""
    keys = {atom.name[len(SIZE_PREFIX) :] for atom in found if atom.name.startswith(SIZE_PREFIX)}
    facts = []
    for atom in sorted(found, key=_atom_order):
        key = listed_key(atom)
        if key is not None and key in keys:
            spans = tr.as_int(group_size(key), "a") == tr.world
            facts.append(tr.z3.Implies(spans, tr.as_int(atom, "a") == tr.as_int(atom, "b")))
    return facts


def listed_key(atom: Atom) -> str | None:
    """The group whose rank list (or a member read from it at a constant place) `atom` is."""
    if atom.name.startswith(RANKS_PREFIX):
        return atom.name[len(RANKS_PREFIX) :]
    if atom.name.startswith(GLOBAL_OF_PREFIX):
        return atom.name[len(GLOBAL_OF_PREFIX) : -1].rpartition("[")[0]
    return None


def _atom_order(atom: Atom) -> tuple[str, str]:
    return atom.name, atom.kind


def _own_lists(found: frozenset[Atom], key: str) -> set[Atom]:
    """The group's rank list and the members read from it (`ranks[0]`) among the atoms."""
    listed = f"{GLOBAL_OF_PREFIX}{key}["
    return {atom for atom in found if atom.name == RANKS_PREFIX + key or atom.name.startswith(listed)}


def _listed_members(found: frozenset[Atom]) -> set[tuple[str, int]]:
    listed = set()
    for atom in found:
        if atom.name.startswith(GLOBAL_OF_PREFIX):
            key, _, index = atom.name[len(GLOBAL_OF_PREFIX) : -1].rpartition("[")
            listed.add((key, int(index)))
    return listed


@dataclass(frozen=True)
class GroupFacts:
    """What the catalogs say about named groups: each one's members (a condition over the rank's
    place in other groups) and the grids of orthogonal groups."""

    members: Mapping[str, Expr] = field(default_factory=dict)
    grids: tuple[tuple[str, ...], ...] = ()


NO_GROUP_FACTS = GroupFacts()


def member_facts(tr: Any, group: GroupVal, found: frozenset[Atom], known: GroupFacts) -> list[Any]:
    """z3 facts for ranks `a` and `b`, both members of `group`, compared on its channel."""
    size = tr.as_int(group_size(group.key), "a")
    rank_a, rank_b = tr.as_int(local_rank(group.key), "a"), tr.as_int(local_rank(group.key), "b")
    facts = [size >= 2, size <= tr.world, rank_a >= 0, rank_b >= 0, rank_a < size, rank_b < size]
    facts.append(rank_a != rank_b)
    for atom in sorted(_own_lists(found, group.key), key=_atom_order):
        facts.append(tr.as_int(atom, "a") == tr.as_int(atom, "b"))  # the same list on its members
    declared = known.members.get(group.key)
    if declared is not None:
        facts.extend((tr.as_bool(declared, "a"), tr.as_bool(declared, "b")))
    if group.members is None:
        # A membership test against a collection collcheck cannot see: the group's own test; a test
        # against another group's rank list (`get_process_group_ranks(other)`) is that group's.
        for atom in sorted(_membership_atoms(found), key=_atom_order):
            if own_membership(atom, group.key):
                facts.extend((tr.as_bool(atom, "a"), tr.as_bool(atom, "b")))
        # A value computed from the rank in a way collcheck cannot follow (a shard read by rank, a
        # stage id from a grid object) may well be what the group was built from: among the members
        # of a group of unknown membership it is not taken to split them (precision over recall).
        for atom in sorted(opaque_rank_atoms(found), key=_atom_order):
            facts.append(tr.as_bool(atom, "a") == tr.as_bool(atom, "b"))
            facts.append(tr.as_int(atom, "a") == tr.as_int(atom, "b"))
    mentioned = _local_rank_keys(found)
    same = shared_positions(group.key, mentioned, known.grids)
    if group.members is None and group.color is None:
        same |= other_axes(group.key, mentioned, known)
    for other in sorted(same):
        facts.append(tr.as_int(local_rank(other), "a") == tr.as_int(local_rank(other), "b"))
    return facts


def _catalogued(key: str, known: GroupFacts) -> bool:
    return key in known.members or any(key in grid for grid in known.grids)


def other_axes(key: str, mentioned: set[str], known: GroupFacts) -> set[str]:
    """Groups, among those whose local ranks the conditions mention, taken to be other axes of one
    grid with `key`, a group of unknown membership (two members of `key` hold the same position in
    each): the groups no catalog fact relates to it. Code that holds several groups at once (a data-,
    a pipeline- and a tensor-parallel group handed to a constructor) lays the ranks out on a grid,
    and `if dp_rank != 0: return` before a pipeline-group barrier lets whole pipeline groups through
    or none. A group nested in another (a node's ranks inside a larger group) breaks that
    assumption; its hangs are given up for precision, as for the opaque per-rank values above. What
    the catalogs say about their groups (`[group_grids]`, `[group_members]`) is kept as it is."""
    if _catalogued(key, known):
        return set()
    return {other for other in mentioned if other != key and not _catalogued(other, known)}
