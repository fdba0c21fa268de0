"""Argument checks that run while a kernel is traced (specialization time)."""


def kernel_assert(cond, msg: str) -> None:
    """Raises AssertionError("nkilib: <msg>") when `cond` is false."""
    if not cond:
        raise AssertionError(f"nkilib: {msg}")


def assert_shape(t, shape, name: str) -> None:
    kernel_assert(
        tuple(t.shape) == tuple(shape), f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}"
    )
