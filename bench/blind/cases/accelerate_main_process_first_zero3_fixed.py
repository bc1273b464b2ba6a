"""
Source: https://github.com/huggingface/accelerate/issues/3709
Project: HF accelerate (with DeepSpeed ZeRO-3 and transformers)
Reported: 2025-08
Backend: NCCL
Hang: The script loads the model inside `accelerator.main_process_first()`. That context manager
makes non-main ranks sit in a barrier first while rank 0 runs the body; but with ZeRO-3 active,
`from_pretrained` builds the model under `deepspeed.zero.Init` and gathers/broadcasts every
partitioned parameter while loading weights, which are collectives over all ranks. Rank 0 waits in
those broadcasts, the other ranks wait in the barrier, and nobody advances.
Fix: Load the ZeRO-3 model on all ranks together, outside `main_process_first()` (the thread's
resolution is to drop the context manager around model loading).
"""
from contextlib import contextmanager

import torch
import torch.distributed as dist
import deepspeed
from accelerate import Accelerator, DeepSpeedPlugin


class _ProcessState:
    """Mimics accelerate's PartialState: the rank is read once and kept on the object."""

    def __init__(self):
        self.process_index = dist.get_rank()
        self.num_processes = dist.get_world_size()

    @property
    def is_main_process(self):
        return self.process_index == 0

    def wait_for_everyone(self):
        if self.num_processes > 1:
            dist.barrier()

    def _goes_first(self, is_main):
        if not is_main:
            self.wait_for_everyone()
        yield
        if is_main:
            self.wait_for_everyone()

    @contextmanager
    def main_process_first(self):
        yield from self._goes_first(self.is_main_process)


class ZeroAwareLoader:
    """Stand-in for transformers' from_pretrained path when a ZeRO-3 config is active."""

    def __init__(self, ds_config, zero3_enabled):
        self.ds_config = ds_config
        self.zero3_enabled = zero3_enabled

    def _load_into_zero3(self, model, state_dict):
        for name, param in model.named_parameters():
            # GatheredParameters all-gathers the shards on entry and re-partitions
            # (broadcast from modifier_rank) on exit: collectives on every rank.
            with deepspeed.zero.GatheredParameters([param], modifier_rank=0):
                if dist.get_rank() == 0 and name in state_dict:
                    param.data.copy_(state_dict[name])

    def from_pretrained(self, model_cls, path):
        state_dict = torch.load(f"{path}/pytorch_model.bin", map_location="cpu")
        if self.zero3_enabled:
            with deepspeed.zero.Init(config_dict_or_path=self.ds_config):
                model = model_cls()
            self._load_into_zero3(model, state_dict)
        else:
            model = model_cls()
            model.load_state_dict(state_dict)
        return model


def main(model_cls, path):
    plugin = DeepSpeedPlugin(zero_stage=3)
    accelerator = Accelerator(deepspeed_plugin=plugin)
    state = _ProcessState()
    loader = ZeroAwareLoader(plugin.deepspeed_config, zero3_enabled=True)

    # Every rank loads together: ZeRO-3 loading is itself collective.
    model = loader.from_pretrained(model_cls, path)
    state.wait_for_everyone()

    print(f"Model loaded on {accelerator.device}")
    return model
