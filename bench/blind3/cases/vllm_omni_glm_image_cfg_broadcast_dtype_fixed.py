"""
Source: https://github.com/vllm-project/vllm-omni/pull/3956
Project: vllm-project/vllm-omni (GLM-Image diffusion pipeline, CFG parallelism)
Reported: 2026-05
Backend: XCCL / oneCCL (reproduced on 2x Intel Arc B60; fix also validated on 2x H200 with NCCL)
Hang: rank 0's latents became float32 after scheduler.step() while rank 1's stayed bfloat16, so the two ranks called
cfg_group.broadcast(latents, src=0) with different dtypes and the first diffusion step hung.
Fix: cast latents back to transformer_dtype on rank 0 before the broadcast.
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
                latents = self.scheduler.step(guided, t, latents).prev_sample
                latents = latents.to(transformer_dtype)
            cfg_group.broadcast(latents, src=0)
        return latents
