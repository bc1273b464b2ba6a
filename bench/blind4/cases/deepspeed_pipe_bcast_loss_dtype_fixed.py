"""
Source: https://github.com/deepspeedai/DeepSpeed/pull/3316
Project: DeepSpeed
Reported: 2023-04
Backend: NCCL
Hang: PipelineEngine.eval_batch broadcasts the evaluation loss from the last pipeline stage to the other stages.
With fp16 enabled the last stage (the source) hands its fp16 loss tensor straight to the broadcast, while every
other stage allocates an fp32 receive buffer. The ranks of the pipe group therefore issue the same broadcast with
different dtypes/byte counts; it does not error but the receivers read garbage ("noise") instead of the loss.
Fix: Cast the source tensor to the requested dtype (and device) before the broadcast so every rank passes a
float32 tensor of the same size.
"""
import torch

from deepspeed import comm as dist
from deepspeed.runtime.engine import DeepSpeedEngine
from deepspeed.runtime.pipe import schedule


class PipelineEngine(DeepSpeedEngine):
    """Slice of the pipeline engine that evaluates a batch and shares the loss with all stages."""

    def __init__(self, *super_args, **super_kwargs):
        super().__init__(*super_args, **super_kwargs)
        self.grid = self.mpu  # PipelineParallelGrid
        self.num_stages = self.grid.pipe_parallel_size
        self.stage_id = self.grid.get_stage_id()
        self.global_rank = dist.get_rank()
        self.fwd_outputs = []

    def is_last_stage(self) -> bool:
        return self.stage_id == self.num_stages - 1

    def _reduce_outputs(self, outputs):
        reduced = sum(outputs) / len(outputs)
        if self.is_data_parallel:
            dist.all_reduce(reduced, group=self.mpu.get_data_parallel_group())
            reduced /= self.dp_world_size
        return reduced

    def _bcast_pipe_scalar(self, data, src_rank=None, dtype=torch.float32):
        # by default the loss lives on the last stage
        if src_rank is None:
            src_rank = self.grid.stage_to_global(self.num_stages - 1)
        assert src_rank in self.grid.pp_group

        if self.global_rank == src_rank:
            result = data.clone().detach().type(dtype).to(self.device)
        else:
            result = torch.Tensor([0.0]).type(dtype).to(self.device)

        dist.broadcast(tensor=result, src=src_rank, group=self.mpu.get_pipe_parallel_group())
        return result

    def eval_batch(self, data_iter, return_logits=False, bcast_loss=True):
        self.module.eval()
        self.fwd_outputs = []
        sched = schedule.InferenceSchedule(
            micro_batches=self.micro_batches, stages=self.num_stages, stage_id=self.stage_id
        )
        self.set_dataiterator(data_iter)
        with torch.no_grad():
            self._exec_schedule(sched)

        if self.is_last_stage():
            eval_output = self._reduce_outputs(self.fwd_outputs)  # fp16 when fp16 is enabled
        else:
            eval_output = None

        if bcast_loss:
            eval_output = self._bcast_pipe_scalar(eval_output)
        return eval_output
