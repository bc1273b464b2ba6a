"""
Source: https://github.com/meta-pytorch/captum/pull/1877
Project: Captum (distributed FeatureImportance / permutation attribution)
Reported: 2026-07
Backend: NCCL
Hang: Distributed feature-importance evaluation runs the model on every rank, and the model issues
an all-to-all inside its forward (sharded embeddings). For each feature the engine skips the
iteration when the local batch has fewer than two events, since the feature cannot be permuted.
The batch differs per rank, so some ranks skip the forward (and its all-to-all) while others run
it, and the ranks that ran it wait forever in the all-to-all.
Fix: Add a `run_forward_on_skip` flag: when an iteration is skipped, still run the model forward
(result discarded) so the collectives stay in step; the attribution result is unchanged.
"""
import torch
import torch.distributed as dist


class ShardedEmbeddingModel(torch.nn.Module):
    def __init__(self, tables, dense):
        super().__init__()
        self.tables = tables
        self.dense = dense

    def forward(self, batch):
        local = self.tables(batch["ids"])
        out = [torch.empty_like(local) for _ in range(dist.get_world_size())]
        dist.all_to_all(out, [local] * dist.get_world_size())  # collective inside forward
        return self.dense(torch.cat(out, dim=-1), batch["dense"])


class DistributedFeatureImportance:
    def __init__(self, model, metric_fn, run_forward_on_skip=False):
        self.model = model
        self.metric_fn = metric_fn
        self.run_forward_on_skip = run_forward_on_skip

    @staticmethod
    def _num_events(batch):
        return int(batch["ids"].shape[0])

    def _permute(self, batch, feature):
        perm = torch.randperm(self._num_events(batch))
        permuted = dict(batch)
        permuted[feature] = batch[feature][perm]
        return permuted

    @torch.no_grad()
    def attribute(self, batch, features):
        baseline = self.metric_fn(self.model(batch), batch)
        scores = {}
        for feature in features:
            if self._num_events(batch) < 2:  # DIVERGES
                scores[feature] = torch.tensor(0.0)
                continue  # DIVERGES: this rank skips the forward and its all-to-all
            permuted = self._permute(batch, feature)
            scores[feature] = baseline - self.metric_fn(self.model(permuted), batch)
        return scores
