"""
Source: https://github.com/Gorilla-Lab-SCUT/PaDT/issues/21
Project: PaDT (Gorilla-Lab-SCUT), PaDTTrainer.compute_loss (HF Trainer + DDP / DeepSpeed)
Reported: 2025-12
Backend: NCCL
Hang: PaDT decodes the visual reference tokens of each sample with a lightweight decoder to predict
boxes/masks. compute_loss only runs that decoder when the batch has objects (non-empty loss masks);
for a batch of images without objects it takes the else branch and uses a constant zero loss. On
that rank the decoder's parameters are then not part of the autograd graph, so the gradient
synchronization the other ranks perform for them (DDP bucket all-reduce / ZeRO reduce) is never
issued there, and training deadlocks until the NCCL timeout.
Fix: when a batch has no objects, still run the decoder on dummy inputs and add its output scaled by
0.0 to the loss, keeping the graph (and the gradient collectives) identical on every rank (the fix
posted in the thread by the reporter).
"""
import torch
from transformers import Trainer


class PaDTTrainer(Trainer):
    def _decode_objects(self, model, vp_hidden, image_feats):
        # box / score / mask heads applied to the visual-reference-token hidden states
        return model.padt_decoder(vp_hidden, image_feats)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if return_outputs:
            raise ValueError("The PaDTTrainer does not support returning outputs")
        outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                        pixel_values=inputs["pixel_values"], image_grid_thw=inputs["image_grid_thw"],
                        labels=inputs["labels"], output_hidden_states=True)
        lm_loss = outputs.loss

        loss_masks = inputs["loss_masks"]            # which VRT positions carry an object target
        hidden = outputs.hidden_states[-1]
        if loss_masks.any():
            vp_hidden = hidden[loss_masks]
            pred = self._decode_objects(model, vp_hidden, outputs.image_embeds)
            loss_box = torch.nn.functional.l1_loss(pred["boxes"], inputs["gt_boxes"])
            loss_score = torch.nn.functional.binary_cross_entropy_with_logits(
                pred["scores"], inputs["gt_scores"])
            det_loss = loss_box + loss_score
        else:
            # images without objects: still run the decoder on a dummy token so its parameters
            # stay in the graph and this rank joins the same gradient collectives
            dummy_vp = hidden[:, :1].reshape(-1, hidden.shape[-1])
            pred = self._decode_objects(model, dummy_vp, outputs.image_embeds)
            det_loss = 0.0 * (pred["boxes"].sum() + pred["scores"].sum())

        return lm_loss + det_loss
