"""
Source: https://github.com/ACEsuit/mace/pull/1216
Project: MACE (ACEsuit), mace/tools/train.py distributed training loop
Reported: 2025-10
Backend: NCCL
Hang: In distributed fits only rank 0 evaluates the patience condition after validation (it owns the
validation-loss bookkeeping). When the patience is exhausted rank 0 breaks out of the epoch loop, while
the other ranks never see the condition, go to the end-of-epoch barrier and start the next epoch's
DDP training steps; rank 0 meanwhile runs the post-training path. The ranks wait for each other in
different collectives and the job hangs instead of stopping (issue #1215).
Fix: rank 0 broadcasts its stop decision and every rank breaks out of the loop together.
"""
import logging
from contextlib import nullcontext
from typing import Dict, Optional

import torch
import torch.distributed
from torch.nn.parallel import DistributedDataParallel

from mace.tools.train import evaluate, train_one_epoch, valid_err_log


def train(model, loss_fn, train_loader, valid_loaders: Dict, optimizer, lr_scheduler,
          start_epoch: int, max_num_epochs: int, patience: int, checkpoint_handler, logger,
          eval_interval: int, output_args, device, ema=None, swa=None,
          distributed: bool = False, distributed_model: Optional[DistributedDataParallel] = None,
          train_sampler=None, rank: int = 0):
    lowest_loss = torch.tensor(float("inf"))
    patience_counter = 0
    epoch = start_epoch

    while epoch < max_num_epochs:
        if distributed:
            train_sampler.set_epoch(epoch)
        train_one_epoch(model=model, loss_fn=loss_fn, data_loader=train_loader,
                        optimizer=optimizer, epoch=epoch, output_args=output_args,
                        device=device, ema=ema, distributed_model=distributed_model, rank=rank)
        if distributed:
            torch.distributed.barrier()

        if epoch % eval_interval == 0:
            model_to_evaluate = model if distributed_model is None else distributed_model
            param_context = ema.average_parameters() if ema is not None else nullcontext()
            with param_context:
                valid_loss = 0.0
                for name, loader in valid_loaders.items():
                    valid_loss, eval_metrics = evaluate(model_to_evaluate, loss_fn, loader,
                                                        output_args, device)
                    if rank == 0:
                        valid_err_log(valid_loss, eval_metrics, logger, name, epoch)

            if rank == 0:
                if valid_loss >= lowest_loss:
                    patience_counter += 1
                    if patience_counter >= patience and (swa is None or epoch >= swa.start):
                        logging.info(f"Stopping optimization after {patience_counter} epochs "
                                     "without improvement")
                        break  # DIVERGES
                else:
                    lowest_loss = valid_loss
                    patience_counter = 0
                    checkpoint_handler.save(state={"model": model, "optimizer": optimizer,
                                                   "lr_scheduler": lr_scheduler}, epochs=epoch)
            lr_scheduler.step(metrics=valid_loss)

        if distributed:
            torch.distributed.barrier()
        epoch += 1

    logging.info("Training complete")
