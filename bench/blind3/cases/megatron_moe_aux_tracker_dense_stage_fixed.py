"""
Source: https://github.com/NVIDIA/Megatron-LM/issues/1444
Project: Megatron-LM
Reported: 2025-03
Backend: NCCL
Hang: The MoE aux-loss tracker is a per-process dict that the router fills during forward. At logging time
reduce_aux_losses_tracker_across_ranks() loops over the tracker's keys and all-reduces each entry over the
pipeline-parallel group. With --moe-layer-freq putting only dense layers on the first pipeline stage, that
stage never fills the tracker, so its loop runs zero times while the MoE stages enter an all_reduce per key on
the same PP group; the PP group hangs at the first training_log.
Fix: Build the list of tracked names from the config and force-initialize zero-filled entries for missing names
on every stage before reducing, so every PP rank iterates the same keys.
"""
import torch

from megatron.core import parallel_state

_MOE_LAYER_WISE_LOGGING_TRACKER = {}


def get_moe_layer_wise_logging_tracker():
    return _MOE_LAYER_WISE_LOGGING_TRACKER


def save_to_aux_losses_tracker(name, loss, layer_number, num_layers, reduce_group=None, avg_group=None):
    """Called from the router's forward on stages that own MoE layers."""
    if layer_number is None:
        return
    tracker = get_moe_layer_wise_logging_tracker()
    if name not in tracker:
        tracker[name] = {"values": torch.zeros(num_layers, device=loss.device)}
    tracker[name]["values"][layer_number - 1] += loss.detach()
    tracker[name]["reduce_group"] = reduce_group
    tracker[name]["avg_group"] = avg_group


def reduce_aux_losses_tracker_across_ranks(track_names=None):
    tracker = get_moe_layer_wise_logging_tracker()
    if track_names is None:
        track_names = list(tracker.keys())
    for name in track_names:
        values = tracker[name]["values"]
        torch.distributed.all_reduce(values, group=parallel_state.get_pipeline_model_parallel_group())
        if tracker[name].get("reduce_group") is not None:
            torch.distributed.all_reduce(values, group=tracker[name]["reduce_group"])
        if tracker[name].get("avg_group") is not None:
            torch.distributed.all_reduce(values, group=tracker[name]["avg_group"],
                                         op=torch.distributed.ReduceOp.AVG)


def clear_aux_losses_tracker():
    for entry in get_moe_layer_wise_logging_tracker().values():
        entry["values"].zero_()


def track_moe_metrics(loss_scale, iteration, writer, total_loss_dict=None, per_layer_logging=False,
                      num_layers=None, moe_layer_freq=None, force_initialize=False, track_names=None):
    tracker = get_moe_layer_wise_logging_tracker()
    if force_initialize and track_names is not None:
        # stages without MoE layers still contribute zeros so every PP rank reduces the same keys
        for key in track_names:
            if key not in tracker:
                tracker[key] = {"values": torch.zeros(num_layers, device="cuda"),
                                "reduce_group": None, "avg_group": None}
    reduce_aux_losses_tracker_across_ranks(track_names)
    tracker = get_moe_layer_wise_logging_tracker()
    for name, entry in tracker.items():
        loss = entry["values"] * loss_scale
        if total_loss_dict is not None:
            total_loss_dict[name] = loss.sum().item()
        if writer is not None:
            writer.add_scalar(name, loss.sum(), iteration)
    clear_aux_losses_tracker()


def training_log(args, iteration, loss_scale, writer, total_loss_dict):
    if args.num_experts is not None:
        track_names = []
        if args.moe_router_load_balancing_type in ("aux_loss", "seq_aux_loss"):
            track_names.append("load_balancing_loss")
        if args.moe_z_loss_coeff is not None:
            track_names.append("z_loss")
        track_moe_metrics(loss_scale=loss_scale / args.micro_batch_size, iteration=iteration,
                          writer=writer, total_loss_dict=total_loss_dict,
                          num_layers=args.num_layers, moe_layer_freq=args.moe_layer_freq,
                          force_initialize=True, track_names=track_names)
