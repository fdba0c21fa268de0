"""Argument checks that run while a kernel is traced (specialization time)."""


def kernel_assert(condition, error_text: str) -> None:
    """Raises AssertionError("nkilib: <error_text>") when `condition` is false."""
    if not condition:
        raise AssertionError(f"nkilib: {error_text}")


def assert_shape(tensor, expected_shape, tensor_name: str, error_text: str = "") -> None:
    """Checks tensor.shape == expected_shape, naming the tensor (and error_text) if not."""
    kernel_assert(
        tuple(tensor.shape) == tuple(expected_shape),
        f"{tensor_name} has shape {tuple(tensor.shape)}, expected {tuple(expected_shape)}"
        + (f". {error_text}" if error_text else ""),
    )
