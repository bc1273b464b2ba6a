"""
Source: https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/6025
Project: NeMo (Megatron-Bridge)
Reported: 2026-09
Backend: NCCL
Hang: With pipeline parallelism > 1 and only process_non_loss_data_func configured, evaluate() picks the
communicating pipeline schedule for the non-loss collection pass but launches it only on the last world rank.
That rank sits on the final pipeline stage and blocks in recv_forward() for activations from earlier stages,
which skipped the schedule and returned; validation hangs deterministically.
Fix: Run the non-loss collection schedule on every rank and only invoke process_non_loss_data_func on the last rank.
"""
import torch
from megatron.core import parallel_state
from megatron.core.num_microbatches_calculator import get_num_microbatches
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.utils import get_model_config


def is_last_rank():
    return torch.distributed.get_rank() == torch.distributed.get_world_size() - 1


class EvalConfig:
    def __init__(self, eval_iters, seq_length, micro_batch_size):
        self.eval_iters = eval_iters
        self.seq_length = seq_length
        self.micro_batch_size = micro_batch_size


def evaluate(state, forward_step_func, data_iterator, model, process_non_loss_data_func, cfg,
             non_loss_data_func=None):
    for model_module in model:
        model_module.eval()

    total_loss_dict = {}
    forward_backward_func = get_forward_backward_func()
    with torch.no_grad():
        for _ in range(cfg.eval_iters):
            loss_dicts = forward_backward_func(
                forward_step_func=forward_step_func,
                data_iterator=data_iterator,
                model=model,
                num_microbatches=get_num_microbatches(),
                seq_length=cfg.seq_length,
                micro_batch_size=cfg.micro_batch_size,
                forward_only=True,
            )
            if parallel_state.is_pipeline_last_stage(ignore_virtual=True):
                for loss_dict in loss_dicts:
                    for key, val in loss_dict.items():
                        total_loss_dict[key] = total_loss_dict.get(key, 0.0) + val
                        torch.distributed.all_reduce(total_loss_dict[key],
                                                     group=parallel_state.get_data_parallel_group())

        collected_non_loss_data = None
        if non_loss_data_func is not None:
            collected_non_loss_data = non_loss_data_func(model)
        elif process_non_loss_data_func is not None:
            # every pipeline rank must take part in the communicating schedule
            collected_non_loss_data = forward_backward_func(
                forward_step_func=forward_step_func,
                data_iterator=data_iterator,
                model=model,
                num_microbatches=get_num_microbatches(),
                seq_length=cfg.seq_length,
                micro_batch_size=cfg.micro_batch_size,
                forward_only=True,
                collect_non_loss_data=True,
            )

    for model_module in model:
        model_module.train()
    return total_loss_dict, collected_non_loss_data


def evaluate_and_print_results(state, prefix, forward_step_func, data_iterator, model, cfg,
                               process_non_loss_data_func=None, writer=None):
    total_loss_dict, collected_non_loss_data = evaluate(
        state, forward_step_func, data_iterator, model, process_non_loss_data_func, cfg)
    if process_non_loss_data_func is not None and writer is not None and is_last_rank():
        process_non_loss_data_func(collected_non_loss_data, state.train_state.step, writer)
    return total_loss_dict
