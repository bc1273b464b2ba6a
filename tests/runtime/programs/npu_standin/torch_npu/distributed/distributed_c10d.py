"""The functions that call the backend object itself, as torch_npu's do (`group._get_backend(...)`),
here with the CPU as the "npu" device."""

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import (
    GatherOptions,
    ReduceScatterOptions,
    _get_default_group,
    all_gather,
    get_group_rank,
    get_rank,
)

from torch_npu import npu

DEVICE = torch.device("cpu")  # torch_npu: torch.device("npu")


def _backend(group):
    return (group or _get_default_group())._get_backend(DEVICE)


def _finish(work, async_op):
    if async_op:
        return work
    work.wait()
    return None


def _gather(tensor, gather_list=None, dst=0, group=None, async_op=False):
    """torch.distributed.gather: HCCL's gather in compatibility mode, else an allgather."""
    gather_list = gather_list or []
    mine = get_rank() == dst
    if npu.are_compatible_impl_enabled():
        options = GatherOptions()
        options.rootRank = dst if group is None else get_group_rank(group, dst)
        work = _backend(group).gather([gather_list] if mine else [], [tensor], options)
    else:
        size = dist.get_world_size(group)
        if not gather_list:
            gather_list = [torch.empty_like(tensor) for _ in range(size)]
        work = _backend(group).allgather([gather_list], [tensor])
    return _finish(work, async_op)


def _gather_object(obj, object_gather_list=None, dst=0, group=None):
    """torch.distributed.gather_object over `_gather`: sizes by all_gather, then the bytes."""
    data = torch.frombuffer(bytearray(repr(obj).encode()), dtype=torch.uint8)
    size = torch.tensor([data.numel()], dtype=torch.long)
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(dist.get_world_size(group))]
    all_gather(sizes, size, group=group)
    longest = int(max(sizes).item())
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[: data.numel()] = data
    mine = get_rank() == dst
    outputs = [torch.zeros(longest, dtype=torch.uint8) for _ in sizes] if mine else None
    _gather(padded, outputs, dst=dst, group=group)
    if mine and object_gather_list is not None:
        for index, (output, length) in enumerate(zip(outputs, sizes, strict=True)):
            object_gather_list[index] = bytes(output[: int(length.item())].tolist()).decode()


def _batch_isend_irecv(p2p_op_list):
    """torch.distributed.batch_isend_irecv: one call of the backend's own batch entry point."""
    group = p2p_op_list[0].group
    kinds = [op.op.__name__ for op in p2p_op_list]
    tensors = [op.tensor for op in p2p_op_list]
    peers = [op.peer if group is None else get_group_rank(group, op.peer) for op in p2p_op_list]
    return [_backend(group).batch_isend_irecv(kinds, tensors, peers)]


def _reduce_scatter_tensor_uneven(
    output, input, input_split_sizes=None, op=dist.ReduceOp.SUM, group=None, async_op=False
):
    options = ReduceScatterOptions()
    options.reduceOp = op
    work = _backend(group).reduce_scatter_tensor_uneven(output, input, input_split_sizes or [], options)
    return _finish(work, async_op)


def _all_gather_into_tensor_uneven(output, input, output_split_sizes=None, group=None, async_op=False):
    work = _backend(group).all_gather_into_tensor_uneven(output, input, output_split_sizes or [])
    return _finish(work, async_op)


def _all_to_all_vc(output, input, send_count_matrix, group=None, async_op=False):
    flat = [int(count) for row in send_count_matrix for count in row]
    work = _backend(group).alltoallvc(output, input, flat)
    return _finish(work, async_op)
