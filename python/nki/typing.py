"""nki.typing: shape/dtype annotations for kernel parameters (``nt.tensor[128, 512]``) and
``nt.mutable_tensor`` for inputs the kernel writes in place. Annotations are documentation
for the tracer: shapes come from the actual arguments."""

from __future__ import annotations


class _Annotation:
    def __init__(self, kind: str, args: tuple):
        self.kind = kind
        self.args = args

    def __repr__(self) -> str:
        inner = ", ".join(repr(a) for a in self.args)
        return f"nt.{self.kind}[{inner}]"

    def __getitem__(self, item):
        return _Annotation(self.kind, item if isinstance(item, tuple) else (item,))


tensor = _Annotation("tensor", ())
mutable_tensor = _Annotation("mutable_tensor", ())


def is_mutable(annotation) -> bool:
    return isinstance(annotation, _Annotation) and annotation.kind == "mutable_tensor"
