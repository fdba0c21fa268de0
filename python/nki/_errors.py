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
