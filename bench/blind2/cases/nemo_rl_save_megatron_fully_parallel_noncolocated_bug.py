"""
Source: https://github.com/NVIDIA-NeMo/RL/pull/2226
Project: NeMo RL (with Megatron-Bridge)
Reported: 2026-04
Backend: NCCL
Hang: In non-colocated mode the default process group spans training GPUs and vLLM
inference GPUs, and initialize_model_parallel() builds the TP/DP/CP groups over that
whole world. Only the training workers run the one-time HF->Megatron conversion;
save_megatron_model() uses CheckpointConfig(fully_parallel_save=True) by default, whose
FullyParallelSaveStrategyWrapper calls all_gather_object on DP sub-groups that contain
vLLM ranks. The vLLM workers never enter the save, so the training ranks block forever.
Fix: call save_megatron_model(..., fully_parallel_save=False) for the conversion so no
DP-group collective is issued (the parameter is exposed by Megatron-Bridge PR #3207).
"""
import inspect
import os

import torch
import torch.distributed as dist
from megatron.bridge import AutoBridge
from megatron.core import parallel_state


def _init_world_for_worker() -> None:
    # WORLD_SIZE counts training + inference GPUs (set by the worker group launcher)
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))


def import_model_from_hf_name(hf_model_name: str, output_path: str, megatron_config: dict) -> None:
    """One-time conversion, run by the Megatron policy (training) workers only."""
    bridge = AutoBridge.from_hf_pretrained(hf_model_name, trust_remote_code=True)
    # groups are derived from the full default world, which includes vLLM ranks
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=megatron_config.get("tensor_model_parallel_size", 1),
        pipeline_model_parallel_size=megatron_config.get("pipeline_model_parallel_size", 1),
        seed=0,
    )
    model = bridge.to_megatron_model(wrap_with_ddp=False)
    save_kwargs = {}
    bridge.save_megatron_model(model, output_path, **save_kwargs)  # DIVERGES
    parallel_state.destroy_model_parallel()


class MegatronPolicyWorker:
    def __init__(self, config: dict):
        self.cfg = config
        _init_world_for_worker()
        pretrained_path = config["megatron_cfg"]["converted_model_path"]
        if not os.path.exists(os.path.join(pretrained_path, "iter_0000000")):
            import_model_from_hf_name(config["model_name"], pretrained_path, config["megatron_cfg"])
        dist.barrier()


class VllmGenerationWorker:
    def __init__(self, config: dict):
        self.cfg = config
        _init_world_for_worker()
        # inference workers go straight to engine setup; they never run the conversion
        self.llm = self._build_engine(config["model_name"])

    def _build_engine(self, model_name: str):
        from vllm import LLM
        return LLM(model=model_name)
