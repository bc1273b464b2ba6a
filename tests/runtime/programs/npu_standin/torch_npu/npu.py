"""torch_npu.npu, as far as the distributed functions ask it."""

_compatible = False


def are_compatible_impl_enabled() -> bool:
    return _compatible


def set_compatible_impl(enabled: bool) -> None:
    global _compatible
    _compatible = enabled
