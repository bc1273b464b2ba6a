"""
Source: https://github.com/NVIDIA/Megatron-LM/issues/1450
Project: Megatron-LM (megatron.core.pipeline_parallel.p2p_communication, interleaved schedule)
Reported: 2025-03
Backend: NCCL
Hang: With PP=2 + VPP, variable_seq_lengths=True and batch_p2p_comm=True, the interleaved schedule
  calls send_forward_backward_recv_forward_backward, so each stage posts two sends and two receives
  to its single peer (prev rank == next rank). _communicate_shapes always enqueues them in the fixed
  order [send_prev, recv_prev, send_next, recv_next] on both ranks, although the ranks hold opposite
  prev/next roles; tagless NCCL p2p pairs same-peer ops in FIFO order, so shapes are crossed and the
  following data exchange is posted with mismatched sizes/ops, and the stages get stuck (or silently
  swap tensors).
Fix: Build the shape ops in a rank-parity dependent order (even pipeline ranks send-next/recv-prev
  first, odd ranks recv-prev/send-next first), as _p2p_ops already does; this is the direction of the
  proposed PRs #1451/#1485 (not merged in the thread), written here as the obvious fix.
"""
from typing import Optional

import torch

from megatron.core.model_parallel_config import ModelParallelConfig
from megatron.core.parallel_state import (
    get_pipeline_model_parallel_group,
    get_pipeline_model_parallel_next_rank,
    get_pipeline_model_parallel_prev_rank,
    get_pipeline_model_parallel_rank,
)


class _ShapeBuffers:
    def __init__(self, tensor_send_next, tensor_send_prev, recv_prev, recv_next):
        dev = torch.cuda.current_device()
        self.recv_prev = torch.empty((3,), device=dev, dtype=torch.int64) if recv_prev else None
        self.recv_next = torch.empty((3,), device=dev, dtype=torch.int64) if recv_next else None
        self.send_prev = (torch.tensor(tensor_send_prev.size(), device=dev, dtype=torch.int64)
                          if tensor_send_prev is not None else None)
        self.send_next = (torch.tensor(tensor_send_next.size(), device=dev, dtype=torch.int64)
                          if tensor_send_next is not None else None)


def _shape_ops(bufs: _ShapeBuffers, group):
    prev_rank = get_pipeline_model_parallel_prev_rank()
    next_rank = get_pipeline_model_parallel_next_rank()
    ops = []
    # Same order on every stage, regardless of which side of the pair this rank is.
    if bufs.send_prev is not None:  # DIVERGES
        ops.append(torch.distributed.P2POp(torch.distributed.isend, bufs.send_prev, prev_rank, group))
    if bufs.recv_prev is not None:
        ops.append(torch.distributed.P2POp(torch.distributed.irecv, bufs.recv_prev, prev_rank, group))
    if bufs.send_next is not None:
        ops.append(torch.distributed.P2POp(torch.distributed.isend, bufs.send_next, next_rank, group))
    if bufs.recv_next is not None:
        ops.append(torch.distributed.P2POp(torch.distributed.irecv, bufs.recv_next, next_rank, group))
    return ops


def _communicate_shapes(tensor_send_next: Optional[torch.Tensor],
                        tensor_send_prev: Optional[torch.Tensor],
                        recv_prev: bool, recv_next: bool, config: ModelParallelConfig):
    bufs = _ShapeBuffers(tensor_send_next, tensor_send_prev, recv_prev, recv_next)
    ops = _shape_ops(bufs, get_pipeline_model_parallel_group())
    if ops:
        reqs = torch.distributed.batch_isend_irecv(ops)
        for req in reqs:
            req.wait()
    torch.cuda.synchronize()
    prev_shape = bufs.recv_prev.tolist() if bufs.recv_prev is not None else [0, 0, 0]
    next_shape = bufs.recv_next.tolist() if bufs.recv_next is not None else [0, 0, 0]
    return prev_shape, next_shape


def send_forward_backward_recv_forward_backward(output_tensor, input_tensor_grad,
                                                recv_prev: bool, recv_next: bool,
                                                tensor_shape, config: ModelParallelConfig):
    """Used by the interleaved (VPP) 1F1B schedule in steady state."""
    if config.variable_seq_lengths:
        prev_shape, next_shape = _communicate_shapes(
            output_tensor, input_tensor_grad, recv_prev, recv_next, config)
    else:
        prev_shape = next_shape = tensor_shape
    dev = torch.cuda.current_device()
    input_tensor = torch.empty(prev_shape, device=dev, dtype=config.pipeline_dtype) if recv_prev else None
    output_tensor_grad = torch.empty(next_shape, device=dev, dtype=config.pipeline_dtype) if recv_next else None
    group = get_pipeline_model_parallel_group()
    ops = []
    if input_tensor_grad is not None:
        ops.append(torch.distributed.P2POp(torch.distributed.isend, input_tensor_grad,
                                           get_pipeline_model_parallel_prev_rank(), group))
    if input_tensor is not None:
        ops.append(torch.distributed.P2POp(torch.distributed.irecv, input_tensor,
                                           get_pipeline_model_parallel_prev_rank(), group))
    if output_tensor is not None:
        ops.append(torch.distributed.P2POp(torch.distributed.isend, output_tensor,
                                           get_pipeline_model_parallel_next_rank(), group))
    if output_tensor_grad is not None:
        ops.append(torch.distributed.P2POp(torch.distributed.irecv, output_tensor_grad,
                                           get_pipeline_model_parallel_next_rank(), group))
    if ops:
        for req in torch.distributed.batch_isend_irecv(ops):
            req.wait()
    return input_tensor, output_tensor_grad
