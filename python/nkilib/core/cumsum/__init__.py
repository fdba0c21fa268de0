"""nkilib.core.cumsum: cumulative sum along the last dimension."""

from .cumsum import cumsum

__all__ = ["cumsum"]
