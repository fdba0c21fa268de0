"""nkilib.core.output_projection.output_projection_cte: the context-encoding output projection
(the package re-exports the kernel, as the library's does)."""

from ...utils.common_types import QuantizationType
from .output_projection_cte import output_projection_cte

__all__ = ["output_projection_cte", "QuantizationType"]
