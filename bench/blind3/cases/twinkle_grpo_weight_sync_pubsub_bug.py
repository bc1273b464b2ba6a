"""
Source: https://github.com/modelscope/twinkle/pull/102
Project: twinkle (modelscope)
Reported: 2026-03
Backend: HCCL
Hang: During GRPO weight sync the trainer (model side) publishes each bucket's metadata on a ZMQ PUB socket and
then broadcasts the bucket tensor over an HCCL group to the vLLM sampler workers. Workers learn what to receive
from a SUB socket; PUB/SUB silently drops messages under timing jitter (slow joiner / high-water mark), so a
worker that lost a bucket's metadata never enters that broadcast (or waits in recv_pyobj for a message that
will not come) while the sender and the other workers are inside it, and the bucket sequence desynchronizes.
Fix: Replace the PUB/SUB metadata flow with a strict REQ/REP handshake keyed by bucket_id (with a timeout), so
every worker acknowledges each bucket before the sender issues the matching broadcast.
"""
import zmq
import torch
import torch.distributed as dist
import torch_npu  # noqa: F401


class HCCLCheckpointEngine:
    """Ships model weights from the trainer (src rank 0 of `group`) to sampler workers."""

    def __init__(self, group, is_sender, endpoint, bucket_bytes=512 << 20):
        self.group = group
        self.is_sender = is_sender
        self.bucket_bytes = bucket_bytes
        self.ctx = zmq.Context.instance()
        if is_sender:
            self.sock = self.ctx.socket(zmq.PUB)
            self.sock.bind(endpoint)
        else:
            self.sock = self.ctx.socket(zmq.SUB)
            self.sock.connect(endpoint)
            self.sock.setsockopt(zmq.SUBSCRIBE, b"")

    def _buckets(self, named_tensors):
        bucket, size = [], 0
        for name, t in named_tensors:
            bucket.append((name, t))
            size += t.numel() * t.element_size()
            if size >= self.bucket_bytes:
                yield bucket
                bucket, size = [], 0
        if bucket:
            yield bucket

    # ---------------- sender side ----------------
    def send_weights(self, named_tensors):
        for bucket_id, bucket in enumerate(self._buckets(named_tensors)):
            meta = {"bucket_id": bucket_id, "items": [(n, t.shape, t.dtype) for n, t in bucket], "last": False}
            self.sock.send_pyobj(meta)  # DIVERGES  (fire-and-forget: may never reach some workers)
            flat = torch.cat([t.reshape(-1) for _, t in bucket]).npu()
            dist.broadcast(flat, src=0, group=self.group)
        self.sock.send_pyobj({"bucket_id": -1, "items": [], "last": True})

    # ---------------- receiver side ----------------
    def receive_weights(self, load_fn):
        while True:
            meta = self.sock.recv_pyobj()  # a dropped message means this rank skips a bucket
            if meta["last"]:
                break
            numel = sum(int(torch.Size(s).numel()) for _, s, _ in meta["items"])
            dtype = meta["items"][0][2]
            flat = torch.empty(numel, dtype=dtype, device="npu")
            dist.broadcast(flat, src=0, group=self.group)  # DIVERGES
            offset = 0
            for name, shape, _ in meta["items"]:
                n = int(torch.Size(shape).numel())
                load_fn(name, flat[offset:offset + n].view(shape))
                offset += n


class GRPOTrainerMixin:
    def sync_weights_to_sampler(self, engine: HCCLCheckpointEngine):
        if engine.is_sender:
            engine.send_weights(self.model.named_parameters())
        else:
            engine.receive_weights(self.sampler.load_weight)
