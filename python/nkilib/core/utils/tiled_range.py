"""Iteration over a dimension in tiles, the last one possibly ragged."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tile:
    index: int
    start: int
    size: int

    @property
    def stop(self) -> int:
        return self.start + self.size


class TiledRange:
    """``for t in TiledRange(300, 128)`` yields Tile(0, 0, 128), Tile(1, 128, 128), Tile(2, 256, 44)."""

    def __init__(self, size: int, tile: int, start: int = 0):
        if tile <= 0:
            raise ValueError(f"TiledRange: tile size must be positive, got {tile}")
        self.size, self.tile, self.start = size, tile, start

    def __len__(self) -> int:
        return (self.size + self.tile - 1) // self.tile

    def __iter__(self):
        for i in range(len(self)):
            s = i * self.tile
            yield Tile(i, self.start + s, min(self.tile, self.size - s))

    def __getitem__(self, i: int) -> Tile:
        if not 0 <= i < len(self):
            raise IndexError(i)
        s = i * self.tile
        return Tile(i, self.start + s, min(self.tile, self.size - s))
