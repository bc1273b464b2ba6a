"""
Source: https://github.com/vllm-project/vllm-omni/pull/3956
Project: vllm-project/vllm-omni (GLM-Image diffusion pipeline, CFG parallelism)
Reported: 2026-05
Backend: XCCL / oneCCL (reproduced on 2x Intel Arc B60; fix also validated on 2x H200 with NCCL)
Hang: with cfg_parallel_size=2, rank 0 computes the conditional branch and rank 1 the unconditional one; rank 0
then runs scheduler.step(), whose output latents inherit float32 from noise_pred, while rank 1 keeps its latents at
transformer_dtype (bfloat16). Both then call cfg_group.broadcast(latents, src=0) with different dtypes (and so
different byte counts); on the very first diffusion step the broadcast never completes.
Fix: on rank 0, cast latents back to transformer_dtype before the broadcast so both ranks pass the same dtype.
"""
import torch


class GlmImagePipeline:
    def _denoise_cfg_parallel(self, latents, timesteps, prompt_embeds, negative_prompt_embeds, guidance_scale):
        cfg_group = self.cfg_group
        cfg_rank = cfg_group.rank_in_group
        transformer_dtype = self.transformer.dtype
        latents = latents.to(transformer_dtype)
        for t in timesteps:
            embeds = prompt_embeds if cfg_rank == 0 else negative_prompt_embeds
            noise_pred = self.transformer(latents, t, embeds).float()
            gathered = cfg_group.all_gather(noise_pred.unsqueeze(0), dim=0)
            if cfg_rank == 0:
                cond, uncond = gathered[0], gathered[1]
                guided = uncond + guidance_scale * (cond - uncond)
                # scheduler.step returns float32 latents (inherits noise_pred's dtype)
                latents = self.scheduler.step(guided, t, latents).prev_sample
            # rank 0: float32, rank 1: bfloat16
            cfg_group.broadcast(latents, src=0)  # DIVERGES  (dtype/size of the broadcast buffer differs between rank 0 and rank 1)
        return latents
