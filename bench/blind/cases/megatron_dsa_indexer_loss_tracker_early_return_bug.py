"""
Source: https://github.com/NVIDIA/Megatron-LM/issues/4745
Project: Megatron-LM (megatron/core/transformer/experimental_attention_variant/dsa.py)
Reported: 2026-05
Backend: NCCL
Hang: The DSA indexer loss is written into a class-level tracker only by layers that own an indexer
  (CSA layers). At logging time every rank calls reduce_loss_in_tracker(), which returns early when the
  tracker has no "values" entry and otherwise all-reduces the values over the pipeline-parallel group.
  With a heterogeneous layout (e.g. PP=4 and a stage holding only dense/HCA layers) that stage never
  populated the tracker, skips the all_reduce, and the other PP ranks block in it after the first
  iteration; no iteration log is ever printed.
Fix: Make every pipeline rank take part: allocate the per-layer values tensor (zeros) when the stage
  recorded nothing and run the same all_reduce sequence (fixed in PR #4518 per the thread; written here
  as the obvious equivalent).
"""
import torch

from megatron.core import parallel_state


class DSAIndexerLossLoggingHelper:
    """Collects the indexer KL loss per layer for logging, like the MoE aux-loss tracker."""

    tracker = {}

    @staticmethod
    def save_loss_to_tracker(loss: torch.Tensor, layer_number: int, num_layers: int,
                             reduce_group=None, avg_group=None):
        if layer_number is None:
            return
        tracker = DSAIndexerLossLoggingHelper.tracker
        if "values" not in tracker:
            tracker["values"] = torch.zeros(num_layers, device=loss.device)
        tracker["values"][layer_number - 1] += loss.detach()
        tracker["reduce_group"] = reduce_group
        tracker["avg_group"] = avg_group

    @staticmethod
    def reduce_loss_in_tracker(num_layers: int):
        tracker = DSAIndexerLossLoggingHelper.tracker
        if "values" not in tracker:
            return  # DIVERGES
        values = tracker["values"]
        torch.distributed.all_reduce(values, group=parallel_state.get_pipeline_model_parallel_group())
        if tracker.get("reduce_group") is not None:
            torch.distributed.all_reduce(values, group=tracker["reduce_group"])
        if tracker.get("avg_group") is not None:
            torch.distributed.all_reduce(values, group=tracker["avg_group"],
                                         op=torch.distributed.ReduceOp.AVG)

    @staticmethod
    def clean_loss_in_tracker():
        tracker = DSAIndexerLossLoggingHelper.tracker
        if "values" in tracker:
            tracker["values"].zero_()
        tracker["reduce_group"] = None
        tracker["avg_group"] = None

    @staticmethod
    def track_indexer_metrics(loss_scale: float, iteration: int, writer, num_layers: int,
                              total_loss_dict=None):
        DSAIndexerLossLoggingHelper.reduce_loss_in_tracker(num_layers)
        tracker = DSAIndexerLossLoggingHelper.tracker
        if "values" in tracker:
            loss = tracker["values"] * loss_scale
            if writer is not None:
                writer.add_scalar("dsa_indexer_loss", loss.sum().item(), iteration)
            if total_loss_dict is not None:
                total_loss_dict["dsa_indexer_loss"] = loss.sum()
        DSAIndexerLossLoggingHelper.clean_loss_in_tracker()


def training_log(args, iteration, writer, total_loss_dict):
    # called on every rank after each iteration
    if args.dsa_indexer_loss_coeff > 0:
        DSAIndexerLossLoggingHelper.track_indexer_metrics(
            loss_scale=1.0 / args.global_batch_size, iteration=iteration, writer=writer,
            num_layers=args.num_layers, total_loss_dict=total_loss_dict)
