"""The configuration object of the attention_tkg SBUF subkernel (``AttnTKGConfig``): shapes and
layout flags, with the library's fields and defaults (see attention_tkg.py for what each layout
flag selects)."""

from __future__ import annotations

from dataclasses import dataclass

import nki.language as nl


@dataclass
class AttnTKGConfig(nl.NKIObject):
    """Shapes (bs, q_head, s_active, curr_sprior, full_sprior, d_head, block_len) and the
    library's layout/performance flags, with the library's defaults."""

    bs: int = 0
    q_head: int = 0
    s_active: int = 0
    curr_sprior: int = 0
    full_sprior: int = 0
    d_head: int = 0
    block_len: int = 0
    tp_k_prior: bool = False
    strided_mm1: bool = True
    use_pos_id: bool = False
    fuse_rope: bool = False
    use_gpsimd_sb2sb: bool = True
    qk_in_sb: bool = False
    k_out_in_sb: bool = False
    out_in_sb: bool = False
    enable_fa_s_prior_tiling: bool = True
