"""
Source: https://github.com/NVIDIA/Megatron-LM/pull/3401
Project: Megatron-LM (megatron/core/transformer/moe/moe_utils.py, training_log)
Reported: 2026-02
Backend: NCCL
Hang: With MoE + MTP + pipeline parallelism the router records aux losses into a tracker tensor of
size num_layers + mtp_num_layers (e.g. 15). At logging time track_moe_metrics(force_initialize=True)
creates missing tracker entries with size num_layers only (14). A PP stage without MoE layers never
recorded anything, so it gets the 14-element tensor while MoE stages hold 15-element ones; the
all_reduce over the pipeline group in reduce_aux_losses_tracker_across_ranks then runs with different
sizes on different ranks and hangs at the first training_log.
Fix: Size force-initialized entries with num_layers + mtp_num_layers, the same size the router uses.
"""
import torch
from megatron.core import parallel_state

_MOE_LAYER_WISE_LOGGING_TRACKER = {}


def get_moe_layer_wise_logging_tracker():
    return _MOE_LAYER_WISE_LOGGING_TRACKER


def save_to_aux_losses_tracker(name, loss, layer_number, num_layers, reduce_group=None, avg_group=None):
    if layer_number is None:
        return
    tracker = get_moe_layer_wise_logging_tracker()
    if name not in tracker:
        tracker[name] = {}
        tracker[name]["values"] = torch.zeros(num_layers, device=loss.device)
    tracker[name]["values"][layer_number - 1] += loss.detach()
    tracker[name]["reduce_group"] = reduce_group
    tracker[name]["avg_group"] = avg_group


class TopKRouter(torch.nn.Module):
    def __init__(self, config, layer_number):
        super().__init__()
        self.config = config
        self.layer_number = layer_number

    def _save_aux_loss(self, name, loss):
        # MTP layers are numbered after the decoder layers
        num_layers = self.config.num_layers + (self.config.mtp_num_layers or 0)
        save_to_aux_losses_tracker(
            name, loss, self.layer_number, num_layers,
            reduce_group=parallel_state.get_tensor_model_parallel_group(),
        )


def reduce_aux_losses_tracker_across_ranks(track_names=None):
    tracker = get_moe_layer_wise_logging_tracker()
    if track_names is None:
        track_names = tracker.keys()
    for name in track_names:
        values = tracker[name]["values"]
        # collect losses from all pipeline stages
        torch.distributed.all_reduce(values, group=parallel_state.get_pipeline_model_parallel_group())
        if tracker[name].get("reduce_group") is not None:
            torch.distributed.all_reduce(values, group=tracker[name]["reduce_group"])


def track_moe_metrics(loss_scale, iteration, writer, total_loss_dict=None, per_layer_logging=False,
                      force_initialize=False, track_names=None, num_layers=None, mtp_num_layers=None):
    tracker = get_moe_layer_wise_logging_tracker()
    if force_initialize:
        if track_names is not None:
            for key in track_names:
                if key not in tracker:
                    tracker[key] = {}
                    tracker[key]["values"] = torch.zeros(num_layers, device="cuda")  # DIVERGES: size differs from router's on dense-only stages
                    tracker[key]["reduce_group"] = None
                    tracker[key]["avg_group"] = None
    reduce_aux_losses_tracker_across_ranks(track_names)
    for name in tracker:
        value = tracker[name]["values"].float() * loss_scale
        if writer is not None:
            writer.add_scalar(name, value.sum() / max(1, value.numel()), iteration)
        tracker[name]["values"].zero_()


def training_log(args, iteration, writer):
    if args.num_experts is not None:
        track_names = ["load_balancing_loss"]
        if args.moe_z_loss_coeff is not None:
            track_names.append("z_loss")
        track_moe_metrics(
            loss_scale=1.0 / args.eval_iters, iteration=iteration, writer=writer,
            force_initialize=True, track_names=track_names,
            num_layers=args.num_layers, mtp_num_layers=args.mtp_num_layers,
        )
