"""Graph rewrite: index_put into one slice of a tensor becomes an index_put into the tensor.

A static KV cache stacked over layers (``cache[layer][:, :, pos] = k``) reaches the compiler,
after functionalization, as

    sel = select(cache_v, 0, layer)
    upd = index_put(sel, [None, None, pos], k)
    cache_v1 = select_scatter(cache_v, upd, 0, layer)

which, taken literally, copies the whole slice (index_put) and then the whole cache
(select_scatter) for every layer and token. The same update is one advanced-indexing write

    cache_v1 = index_put(cache_v, [layer_t, None, None, pos], k')

(``layer_t`` a one-element index tensor, ``k'`` the values laid out for the new indexing),
which writes only the new rows; a chain of them ending in the cache input's mutation runs in
place (csrc/compiler/lower.cpp). Only this exact pattern is rewritten; the result is the same
tensor, element for element.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def _meta(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _adv_layout(indices: list) -> tuple[int, int, bool]:
    """(position of the first advanced index, number of advanced indices, adjacent?)"""
    pos = [k for k, i in enumerate(indices) if i is not None]
    return pos[0], len(pos), pos == list(range(pos[0], pos[0] + len(pos)))


def rewrite_slice_index_put(gm: torch.fx.GraphModule) -> int:
    """Rewrites select_scatter(v, index_put(select(v, d, i), idx, val), d, i); returns how many."""
    g = gm.graph
    count = 0
    for s in list(g.nodes):
        if s.op != "call_function" or s.target is not aten.select_scatter.default:
            continue
        base, upd, dim, index = (list(s.args) + [None] * 4)[:4]
        if not isinstance(upd, torch.fx.Node) or upd.target is not aten.index_put.default:
            continue
        if len(upd.users) != 1:
            continue
        sel, indices, values = upd.args[:3]
        accumulate = upd.args[3] if len(upd.args) > 3 else upd.kwargs.get("accumulate", False)
        if accumulate or not isinstance(sel, torch.fx.Node) or sel.target is not aten.select.int:
            continue
        if sel.args[0] is not base or len(sel.users) != 1:
            continue
        bv, sv, vv = _meta(base), _meta(sel), _meta(values)
        if bv is None or sv is None or vv is None:
            continue
        d = dim % bv.dim()
        if sel.args[1] % bv.dim() != d or sel.args[2] != index or not isinstance(index, int):
            continue
        idx = list(indices) + [None] * (sv.dim() - len(indices))
        tensors = [i for i in idx if i is not None]
        if not tensors or any(_meta(i) is None or _meta(i).dtype not in (torch.int32, torch.int64) for i in tensors):
            continue
        if len({_meta(i).dtype for i in tensors}) != 1:
            continue
        first, _, adjacent = _adv_layout(idx)
        if not adjacent:
            continue
        adv_shape = list(torch.broadcast_shapes(*[tuple(_meta(i).shape) for i in tensors]))
        if not adv_shape:
            continue  # 0-d indices: the one-element layer index would add a dimension
        # Shape the old values broadcast to: sel dims before the block, the block, the rest.
        rest = [sv.shape[k] for k in range(sv.dim()) if idx[k] is None]
        old_target = rest[:first] + adv_shape + rest[first:]
        # New indexing of the base: the layer index joins the advanced indices. Unless it ends
        # up adjacent to them, the broadcast block moves to the front.
        new_idx = idx[:d] + ["LAYER"] + idx[d:]
        nfirst, _, nadjacent = _adv_layout(new_idx)
        nb = len(adv_shape)
        if nadjacent:
            perm = None  # block stays where it was (relative to the remaining dims)
            if nfirst != first:
                continue
        else:
            perm = list(range(first, first + nb)) + [k for k in range(len(old_target)) if not first <= k < first + nb]
        idx_dtype = _meta(tensors[0]).dtype
        with g.inserting_before(s):
            layer_t = g.call_function(aten.full.default, ([1], index),
                                      {"dtype": idx_dtype, "device": _meta(tensors[0]).device, "pin_memory": False})
            layer_t.meta["val"] = _meta(tensors[0]).new_full([1], index)
            vals = g.call_function(aten.expand.default, (values, old_target))
            vals.meta["val"] = vv.expand(old_target)
            if perm is not None and perm != list(range(len(perm))):
                p = g.call_function(aten.permute.default, (vals, perm))
                p.meta["val"] = vals.meta["val"].permute(perm)
                vals = p
            args = [layer_t if i == "LAYER" else i for i in new_idx]
            while args and args[-1] is None:
                args.pop()
            new = g.call_function(aten.index_put.default, (base, args, vals))
            new.meta["val"] = s.meta.get("val")
        s.replace_all_uses_with(new)
        g.erase_node(s)
        g.erase_node(upd)
        g.erase_node(sel)
        count += 1
    if count:
        g.lint()
        gm.recompile()
    return count
