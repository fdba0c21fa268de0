"""The error NKI raises for a kernel that breaks a hardware rule (also importable as
``nki.isa.NkiValidationError``)."""

from __future__ import annotations


class NkiValidationError(AssertionError):
    """A kernel violates a NeuronCore rule, or reads memory it never wrote.

    The message names the instruction, the kernel source ``file:line``, the offending values
    and the rule. The same facts are attributes:

    ``kind``         "validation" (a static rule), "uninitialized" or "runtime"
    ``instruction``  e.g. ``"nki.isa.nc_matmul (from nki.language.matmul)"``
    ``location``     ``"kernel.py:42"``
    ``rule``         the hardware rule, e.g. ``"partition dimension <= 128 (nl.tile_size.pmax)"``
    """

    kind: str = "validation"
    instruction: str = ""
    location: str = ""
    rule: str = ""


def index_error(message: str, full: str, instruction: str, location: str, rule: str) -> IndexError:
    """The error of an access outside a tensor (an indirect DMA index out of range): an
    ``IndexError`` whose text is the NKI simulator's (``index 66048 is out of bounds for axis
    0 with size 65536``, the flattened tensor's first element outside it); the instruction,
    its source line, the offending index and the rule are a note of it and attributes."""
    e = IndexError(message.split("; ", 1)[0])
    e.add_note(full)
    e.kind, e.instruction, e.location, e.rule = "index", instruction, location, rule
    return e
