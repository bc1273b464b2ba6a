"""
Source: https://github.com/huggingface/transformers/pull/48569
Project: HF transformers (Trainer) with tensor parallelism (tp_plan / DTensor weights)
Reported: 2026-09
Backend: NCCL
Hang: `Trainer.save_model` only calls `_save` (and therefore `model.save_pretrained`) on the process
for which `args.should_save` is true, i.e. global rank 0. Under tensor parallelism the weights are
sharded DTensors and `save_pretrained` gathers each one into a full tensor, a collective over the TP
mesh. Rank 0 enters the gathers alone; the other ranks have skipped the save and are already in the
next training step, so the checkpoint never completes.
Fix: Under TP, let every rank reach `save_pretrained` (the weight gathering is collective) and only
after that return early on non-saving ranks, which skip writing the tokenizer/processor and args.
"""
import os

import torch
from torch.distributed.tensor import DTensor


class TrainingArguments:
    def __init__(self, output_dir, process_index, save_safetensors=True):
        self.output_dir = output_dir
        self.process_index = process_index
        self.save_safetensors = save_safetensors

    @property
    def should_save(self):
        # Only the world main process writes checkpoints.
        return self.process_index == 0


class TPModel(torch.nn.Module):
    """Stand-in for a PreTrainedModel loaded with `tp_plan="auto"`."""

    def save_pretrained(self, save_directory, is_main_process=True, safe_serialization=True):
        state_dict = {}
        for name, tensor in self.state_dict().items():
            if isinstance(tensor, DTensor):
                tensor = tensor.full_tensor()  # all-gather across the TP mesh
            state_dict[name] = tensor.cpu()
        if is_main_process:
            os.makedirs(save_directory, exist_ok=True)
            torch.save(state_dict, os.path.join(save_directory, "pytorch_model.bin"))


class Trainer:
    def __init__(self, model, args, processing_class=None):
        self.model = model
        self.args = args
        self.processing_class = processing_class
        self.is_tp_enabled = getattr(model, "_tp_size", 1) > 1

    def _save(self, output_dir=None):
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        self.model.save_pretrained(
            output_dir,
            is_main_process=self.args.should_save,
            safe_serialization=self.args.save_safetensors,
        )
        if self.processing_class is not None:
            self.processing_class.save_pretrained(output_dir)
        torch.save(self.args, os.path.join(output_dir, "training_args.bin"))

    def save_model(self, output_dir=None, _internal_call=False):
        if output_dir is None:
            output_dir = self.args.output_dir
        if self.args.should_save:  # DIVERGES
            self._save(output_dir)  # DIVERGES

    def _save_checkpoint(self, step):
        self.save_model(os.path.join(self.args.output_dir, f"checkpoint-{step}"), _internal_call=True)

    def train(self, loader, optimizer, save_steps):
        for step, batch in enumerate(loader, start=1):
            loss = self.model(**batch).loss
            loss.backward()  # TP collectives inside backward
            optimizer.step()
            optimizer.zero_grad()
            if step % save_steps == 0:
                self._save_checkpoint(step)
