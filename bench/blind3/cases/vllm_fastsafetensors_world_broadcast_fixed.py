"""
Source: https://github.com/vllm-project/vllm/issues/50959
Project: vLLM
Reported: 2026-08
Backend: NCCL
Hang: With pipeline parallelism and speculative decoding, the draft model is built only on the last PP stage.
Its weights are loaded with --load-format fastsafetensors, whose iterator picks torch.distributed.group.WORLD
as the process group whenever distributed is initialized and then broadcasts every tensor on it. Only the 8
ranks of the last PP stage enter that broadcast chain; the 8 ranks of PP stage 0 never call it, so the first
WORLD broadcast waits forever (watchdog timeout on OpType=BROADCAST).
Fix: Pass the process group of the ranks that actually load the model (the loading stage's group) to the
fastsafetensors loader instead of hard-coding WORLD (fix written here; the issue names the hard-coded WORLD
group as the cause).
"""
import torch
import torch.distributed as dist

from vllm.distributed import get_pp_group, get_tp_group


class SingleGroup:
    def size(self):
        return 1

    def rank(self):
        return 0


class ParallelLoader:
    """Stand-in for fastsafetensors.ParallelLoader: broadcasts each tensor from its owner rank."""

    def __init__(self, pg, files):
        self.pg = pg
        self.files = files

    def iter_tensors(self):
        for owner, name, shape in self.files:
            tensor = torch.empty(shape, device="cuda")
            if isinstance(self.pg, SingleGroup):
                yield name, tensor
                continue
            dist.broadcast(tensor, src=owner, group=self.pg)
            yield name, tensor


def fastsafetensors_weights_iterator(hf_weights_files, use_tqdm_on_load=False, pg=None):
    if pg is not None:
        pass  # ranks that load this model
    elif dist.is_initialized():
        pg = dist.group.WORLD
    else:
        pg = SingleGroup()
    loader = ParallelLoader(pg, hf_weights_files)
    yield from loader.iter_tensors()


class DefaultModelLoader:
    def __init__(self, load_format):
        self.load_format = load_format

    def _get_weights_iterator(self, files):
        if self.load_format == "fastsafetensors":
            # only the current stage's ranks load these files: broadcast within that group
            return fastsafetensors_weights_iterator(files, pg=get_tp_group().device_group)
        raise NotImplementedError

    def load_weights(self, model, files):
        model.load_weights(self._get_weights_iterator(files))


class DSparkProposer:
    def __init__(self, vllm_config, loader, draft_files):
        self.vllm_config = vllm_config
        self.loader = loader
        self.draft_files = draft_files
        self.model = None

    def load_model(self, target_model):
        # the drafter lives only on the last pipeline stage
        if not get_pp_group().is_last_rank:
            return
        self.model = target_model.build_draft_model()
        self.loader.load_weights(self.model, self.draft_files)
