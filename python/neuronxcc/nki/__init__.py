"""``neuronxcc.nki`` is ``nki``: this module replaces itself with the nki package and registers
nki's submodules under the old names, so ``neuronxcc.nki.language is nki.language``."""

import sys as _sys

import nki as _nki

for _name in ("language", "isa", "isa.constants", "typing", "compiler", "dtype", "tensor"):
    _mod = _sys.modules["nki." + _name]
    _sys.modules[__name__ + "." + _name] = _mod
_sys.modules[__name__] = _nki
_sys.modules["neuronxcc"].nki = _nki
