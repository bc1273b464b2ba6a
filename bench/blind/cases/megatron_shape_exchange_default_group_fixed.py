"""
Source: https://github.com/NVIDIA/Megatron-LM/issues/620
Project: Megatron-LM (megatron.core.pipeline_parallel.p2p_communication)
Reported: 2023-12
Backend: NCCL
Hang: With variable_seq_lengths=True the pipeline stages first exchange a 3-element shape tensor
  before the real activation. The data P2P ops are built on the pipeline-parallel group, but the
  shape P2P ops are built without a group, so batch_isend_irecv runs them on the default (world)
  group. With tp>1 there are several pipeline groups (0-2-4-6 and 1-3-5-7); the first batched p2p
  on the world group wants every world rank, the pairs of the second pipeline group never match up
  and rank 1 -> rank 3 blocks forever.
Fix: Pass group=get_pipeline_model_parallel_group() to every P2POp built in _communicate_shapes,
  the same as for the tensor exchange.
"""
from typing import Optional, Tuple

import torch

from megatron.core import parallel_state
from megatron.core.model_parallel_config import ModelParallelConfig


def _communicate_shapes(
    tensor_send_next: Optional[torch.Tensor],
    tensor_send_prev: Optional[torch.Tensor],
    recv_prev: bool,
    recv_next: bool,
    config: ModelParallelConfig,
) -> Tuple[list, list]:
    recv_prev_shape_tensor = None
    recv_next_shape_tensor = None
    send_prev_shape_tensor = None
    send_next_shape_tensor = None
    device = torch.cuda.current_device()
    if recv_prev:
        recv_prev_shape_tensor = torch.empty((3,), device=device, dtype=torch.int64)
    if recv_next:
        recv_next_shape_tensor = torch.empty((3,), device=device, dtype=torch.int64)
    if tensor_send_prev is not None:
        send_prev_shape_tensor = torch.tensor(tensor_send_prev.size(), device=device, dtype=torch.int64)
    if tensor_send_next is not None:
        send_next_shape_tensor = torch.tensor(tensor_send_next.size(), device=device, dtype=torch.int64)

    pp_group = parallel_state.get_pipeline_model_parallel_group()
    ops = []
    if send_prev_shape_tensor is not None:
        ops.append(torch.distributed.P2POp(
            torch.distributed.isend, send_prev_shape_tensor,
            parallel_state.get_pipeline_model_parallel_prev_rank(), pp_group))
    if recv_prev_shape_tensor is not None:
        ops.append(torch.distributed.P2POp(
            torch.distributed.irecv, recv_prev_shape_tensor,
            parallel_state.get_pipeline_model_parallel_prev_rank(), pp_group))
    if send_next_shape_tensor is not None:
        ops.append(torch.distributed.P2POp(
            torch.distributed.isend, send_next_shape_tensor,
            parallel_state.get_pipeline_model_parallel_next_rank(), pp_group))
    if recv_next_shape_tensor is not None:
        ops.append(torch.distributed.P2POp(
            torch.distributed.irecv, recv_next_shape_tensor,
            parallel_state.get_pipeline_model_parallel_next_rank(), pp_group))
    if len(ops) > 0:
        reqs = torch.distributed.batch_isend_irecv(ops)
        for req in reqs:
            req.wait()
    torch.cuda.synchronize()

    recv_prev_shape = [0, 0, 0]
    if recv_prev_shape_tensor is not None:
        recv_prev_shape = recv_prev_shape_tensor.tolist()
    recv_next_shape = [0, 0, 0]
    if recv_next_shape_tensor is not None:
        recv_next_shape = recv_next_shape_tensor.tolist()
    return recv_prev_shape, recv_next_shape


def _batched_p2p_ops(*, tensor_send_prev, tensor_recv_prev, tensor_send_next, tensor_recv_next, group):
    ops = []
    if tensor_send_prev is not None:
        ops.append(torch.distributed.P2POp(
            torch.distributed.isend, tensor_send_prev,
            parallel_state.get_pipeline_model_parallel_prev_rank(), group))
    if tensor_recv_prev is not None:
        ops.append(torch.distributed.P2POp(
            torch.distributed.irecv, tensor_recv_prev,
            parallel_state.get_pipeline_model_parallel_prev_rank(), group))
    if tensor_send_next is not None:
        ops.append(torch.distributed.P2POp(
            torch.distributed.isend, tensor_send_next,
            parallel_state.get_pipeline_model_parallel_next_rank(), group))
    if tensor_recv_next is not None:
        ops.append(torch.distributed.P2POp(
            torch.distributed.irecv, tensor_recv_next,
            parallel_state.get_pipeline_model_parallel_next_rank(), group))
    return torch.distributed.batch_isend_irecv(ops) if ops else []


def _communicate(*, tensor_send_next, tensor_send_prev, recv_prev, recv_next, tensor_shape, config):
    if config.variable_seq_lengths:
        recv_prev_shape, recv_next_shape = _communicate_shapes(
            tensor_send_next, tensor_send_prev, recv_prev, recv_next, config)
    else:
        recv_prev_shape = recv_next_shape = tensor_shape

    device = torch.cuda.current_device()
    tensor_recv_prev = None
    tensor_recv_next = None
    if recv_prev:
        tensor_recv_prev = torch.empty(recv_prev_shape, requires_grad=True,
                                       device=device, dtype=config.pipeline_dtype)
    if recv_next:
        tensor_recv_next = torch.empty(recv_next_shape, requires_grad=True,
                                       device=device, dtype=config.pipeline_dtype)
    reqs = _batched_p2p_ops(
        tensor_send_prev=tensor_send_prev, tensor_recv_prev=tensor_recv_prev,
        tensor_send_next=tensor_send_next, tensor_recv_next=tensor_recv_next,
        group=parallel_state.get_pipeline_model_parallel_group())
    for req in reqs:
        req.wait()
    torch.cuda.synchronize()
    return tensor_recv_prev, tensor_recv_next
