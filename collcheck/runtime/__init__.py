"""The runtime tracer: intercept real collectives, record, verify across ranks, analyse traces.

Importing this package does not import torch; `enable` does, since its caller uses torch anyway.
"""

from __future__ import annotations

import os


def enable(
    trace_dir: str = "collcheck-trace",
    *,
    verify: bool = False,
    strict: bool = False,
    timeout: float = 300.0,
    store: str | None = None,
    abort: bool = True,
    adapters: bool = True,
    native: bool = True,
) -> None:
    """Trace every collective of this process (and of processes it starts).

    Call it before or after `init_process_group`: tracing starts once the default group exists.
    `verify` cross-checks ranks through the job's store in the background; `strict` checks before
    each collective. `timeout` is the stall report threshold in seconds. `abort=False` reports
    mismatches and stalls without ending the job. `adapters=False` leaves communicators that
    bypass c10d (vLLM's PyNccl, vllm-ascend's PyHccl) alone, like COLLCHECK_ADAPTERS=0.
    `native=False` keeps record mode on the Python kernel instead of the compiled one (built on
    first use, about a minute), like COLLCHECK_NATIVE=0.
    """
    from collcheck.runtime.bootstrap import arm
    from collcheck.runtime.tracer import TraceConfig, config_to_env

    config = TraceConfig(
        trace_dir=trace_dir,
        verify=verify or strict,
        strict=strict,
        timeout_s=timeout,
        store_address=store,
        abort=abort,
        native=native,
    )
    # Through the environment, so worker processes spawned from here are traced the same way.
    os.environ.update(config_to_env(config))
    if not adapters:
        os.environ["COLLCHECK_ADAPTERS"] = "0"
    arm()
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        from collcheck.runtime.bootstrap import arm_adapters
        from collcheck.runtime.tracer import start

        arm_adapters()
        start(config)


__all__ = ["enable"]
