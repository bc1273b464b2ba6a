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
        self.timeout_ms = 300_000
        if is_sender:
            # one REP socket per worker endpoint would also do; a ROUTER keeps it to one socket
            self.sock = self.ctx.socket(zmq.ROUTER)
            self.sock.bind(endpoint)
            self.num_workers = dist.get_world_size(group) - 1
        else:
            self.sock = self.ctx.socket(zmq.REQ)
            self.sock.connect(endpoint)
        self.sock.setsockopt(zmq.RCVTIMEO, self.timeout_ms)

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
    def _handshake(self, meta):
        # every worker asks for bucket `bucket_id`; answer each request with the metadata
        for _ in range(self.num_workers):
            ident, _, req = self.sock.recv_multipart()
            want = int(req.decode())
            if want != meta["bucket_id"]:
                raise RuntimeError(f"worker asked for bucket {want}, sender is at {meta['bucket_id']}")
            self.sock.send_multipart([ident, b"", zmq.utils.jsonapi.dumps(meta, default=str)])

    def send_weights(self, named_tensors):
        bucket_id = 0
        for bucket_id, bucket in enumerate(self._buckets(named_tensors)):
            meta = {"bucket_id": bucket_id, "items": [(n, t.shape, t.dtype) for n, t in bucket], "last": False}
            self._handshake(meta)
            flat = torch.cat([t.reshape(-1) for _, t in bucket]).npu()
            dist.broadcast(flat, src=0, group=self.group)
        self._handshake({"bucket_id": bucket_id + 1, "items": [], "last": True})

    # ---------------- receiver side ----------------
    def receive_weights(self, load_fn):
        bucket_id = 0
        while True:
            self.sock.send(str(bucket_id).encode())
            meta = self.sock.recv_pyobj()  # REQ/REP: reply for exactly this bucket or a timeout error
            bucket_id += 1
            if meta["last"]:
                break
            numel = sum(int(torch.Size(s).numel()) for _, s, _ in meta["items"])
            dtype = meta["items"][0][2]
            flat = torch.empty(numel, dtype=dtype, device="npu")
            dist.broadcast(flat, src=0, group=self.group)
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
