"""Iteration over a dimension in tiles, the last one possibly ragged (the library's TiledRange)."""

from __future__ import annotations

import nki.language as nl


class TiledRangeIterator(nl.NKIObject):
    """One tile of a TiledRange: ``size``, ``index``, absolute ``start_offset`` / ``end_offset``
    (``start`` / ``stop`` are neuron-emu's short names for the offsets)."""

    def __init__(self, tile_size: int, tile_index: int, start_offset: int, end_offset: int):
        self.size = tile_size
        self.index = tile_index
        self.start_offset = start_offset
        self.end_offset = end_offset

    @property
    def start(self) -> int:
        return self.start_offset

    @property
    def stop(self) -> int:
        return self.end_offset

    def __eq__(self, other) -> bool:
        return isinstance(other, TiledRangeIterator) and (
            self.size, self.index, self.start_offset, self.end_offset
        ) == (other.size, other.index, other.start_offset, other.end_offset)

    def __hash__(self) -> int:
        return hash((self.size, self.index, self.start_offset, self.end_offset))

    def __repr__(self) -> str:
        return (
            f"TiledRangeIterator(size={self.size}, index={self.index}, "
            f"start_offset={self.start_offset}, end_offset={self.end_offset})"
        )


def TiledRange(size, tile_size: int) -> tuple:
    """The tiles of ``size`` elements (an int, or a TiledRangeIterator to tile it again with
    absolute offsets): ``TiledRange(300, 128)`` has sizes 128, 128, 44 at offsets 0, 128, 256."""
    if tile_size <= 0:
        raise ValueError(f"TiledRange: tile size must be positive, got {tile_size}")
    if isinstance(size, TiledRangeIterator):
        total, base = size.size, size.start_offset
    else:
        total, base = int(size), 0
    if total < 0:
        raise ValueError(f"TiledRange: size must be >= 0, got {total}")
    tiles = []
    for i, rel in enumerate(range(0, total, tile_size)):
        n = min(tile_size, total - rel)
        tiles.append(TiledRangeIterator(n, i, base + rel, base + rel + n))
    return tuple(tiles)
