"""Names that documentation tells users to import exist (docstrings drift when modules move)."""

from __future__ import annotations

import importlib
import re

import pytest

import nkilib.core

IMPORT_LINE = re.compile(r"^\s*from ([\w.]+) import (\w+)\s*$", re.M)


@pytest.mark.parametrize("module,name", IMPORT_LINE.findall(nkilib.core.__doc__))
def test_nkilib_core_docstring_imports(module, name):
    assert hasattr(importlib.import_module(module), name), f"{module}.{name}"


def test_nkilib_core_docstring_lists_imports():
    assert len(IMPORT_LINE.findall(nkilib.core.__doc__)) >= 5
