"""
Source: https://github.com/ByteDance-Seed/VeOmni/pull/957
Project: VeOmni (ByteDance training framework) on Ascend NPU (torch_npu profiler)
Reported: 2026-07
Backend: HCCL
Hang: With profiling on, every rank stops the torch_npu profiler at the end step and the ranks
synchronise with a pair of barriers around the raw Ascend finalisation. Profiler finalisation is
treated as non-fatal by the trainer: an exception on one rank is caught and logged. That rank has
jumped out between the two barriers, so it goes straight into the next step's FSDP collectives
while the other ranks sit in the second barrier; the job diverges and ends in an HCCL timeout.
Fix: Catch initialisation/finalisation/cleanup failures inside the profiler wrapper, disable
profiling on the failing rank, and still let every rank pass both paired barriers (the PR's change).
"""
import logging

import torch
import torch.distributed as dist
import torch_npu

logger = logging.getLogger(__name__)


class NPUProfileConfig:
    def __init__(self, enable, start_step, end_step, trace_dir, npu_analysis_mode="offline"):
        self.enable = enable
        self.start_step = start_step
        self.end_step = end_step
        self.trace_dir = trace_dir
        self.npu_analysis_mode = npu_analysis_mode


class NPUProfiler:
    def __init__(self, config: NPUProfileConfig):
        self.config = config
        self.enabled = config.enable
        self._prof = None

    def start(self):
        experimental_config = torch_npu.profiler._ExperimentalConfig(
            profiler_level=torch_npu.profiler.ProfilerLevel.Level1,
        )
        self._prof = torch_npu.profiler.profile(
            activities=[torch_npu.profiler.ProfilerActivity.CPU, torch_npu.profiler.ProfilerActivity.NPU],
            on_trace_ready=None,  # offline: raw dump only, analysis happens later
            experimental_config=experimental_config,
        )
        self._prof.start()

    def finalize(self):
        dist.barrier()  # all ranks enter finalisation together
        self._prof.stop()  # DIVERGES
        torch_npu.profiler.profiler._dump_raw(self._prof, self.config.trace_dir)
        dist.barrier()  # all ranks leave together


class Trainer:
    def __init__(self, model, optimizer, profile_config: NPUProfileConfig):
        self.model = model  # FSDP2-wrapped on npu
        self.optimizer = optimizer
        self.profiler = NPUProfiler(profile_config)

    def _maybe_profile(self, step):
        if not self.profiler.enabled:
            return
        try:
            if step == self.profiler.config.start_step:
                self.profiler.start()
            elif step == self.profiler.config.end_step:
                self.profiler.finalize()
        except Exception as exc:  # DIVERGES
            # Observability must not kill training: log and keep going.
            logger.warning(f"npu profiler failed at step {step}: {exc}")
            self.profiler.enabled = False

    def fit(self, dataloader, num_steps):
        for step, batch in zip(range(num_steps), dataloader):
            self._maybe_profile(step)
            loss = self.model(**batch).loss
            loss.backward()  # FSDP reduce-scatter over HCCL
            self.optimizer.step()
            self.optimizer.zero_grad()
