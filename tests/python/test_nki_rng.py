"""Random numbers in NKI: nisa.rng / rand2 / dropout / set_rng_seed / rand_set_state /
rand_get_state and nl.rand / random_seed / dropout, against a numpy reference of the XORWOW
generator and of the documented seeding (docs/nki.md "Random numbers"), plus the target rules.
Every statistical check runs on a fixed seed, so it cannot flake."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nki import NkiValidationError

# ---------------------------------------------------------------------------------------------
# Reference: XORWOW (Marsaglia 2003) on states [..., 6] = x, y, z, w, v, d, and the seeding.

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def xorwow(state: np.ndarray, n: int) -> np.ndarray:
    """n outputs of each generator of `state` (uint32 [..., 6], advanced in place): [..., n]."""
    out = np.empty(state.shape[:-1] + (n,), np.uint32)
    for j in range(n):
        x, v = state[..., 0].copy(), state[..., 4].copy()
        t = x ^ (x >> np.uint32(2))
        state[..., 0:4] = state[..., 1:5]
        state[..., 4] = (v ^ (v << np.uint32(4))) ^ (t ^ (t << np.uint32(1)))
        state[..., 5] += np.uint32(362437)
        out[..., j] = state[..., 4] + state[..., 5]
    return out


def vector_draws(state: np.ndarray, n: int) -> np.ndarray:
    """A Vector lane's n draws ([lanes, 4, 6] state: element j from generator j % 4)."""
    per_gen = xorwow(state, (n + 3) // 4)  # [lanes, 4, k]
    return per_gen.transpose(0, 2, 1).reshape(state.shape[0], -1)[:, :n]


def splitmix64(x: int) -> int:
    x = (x + GOLDEN) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def seeded(key: int) -> list[int]:
    w = [splitmix64((key + k * GOLDEN) & M64) >> 32 for k in range(6)]
    if not any(w[:5]):
        w[0] = 1
    return w


def vector_seed_state(seed: int, lanes=range(128)) -> np.ndarray:
    """nisa.set_rng_seed(seed): generator g of lane p from the key seed << 32 | 1 << 16 | p << 4 | g."""
    return np.array([[seeded(seed << 32 | 1 << 16 | p << 4 | g) for g in range(4)] for p in lanes], np.uint32)


def gpsimd_default_state(core: int, lanes=range(128)) -> np.ndarray:
    return np.array([seeded(core << 32 | 2 << 16 | p << 4) for p in lanes], np.uint32)


def unit(r: np.ndarray) -> np.ndarray:
    return (r >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)


# ---------------------------------------------------------------------------------------------
# Kernels


def _store(t):
    out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def rng_kernel(x, P, F, dtype, engine, calls, seed):
    """`calls` consecutive nisa.rng into [P, F] tiles, stacked along dim 1; seeded first when
    `seed` is not None."""
    if seed is not None:
        s = nl.full((1, 1), seed, dtype=nl.int32, buffer=nl.sbuf)
        nisa.set_rng_seed(src_seeds=s)
    out = nl.ndarray((P, calls * F), dtype, buffer=nl.shared_hbm)
    for i in range(calls):
        t = nl.ndarray((P, F), dtype, buffer=nl.sbuf)
        nisa.rng(dst=t, engine=engine)
        nisa.dma_copy(dst=out[:, i * F : (i + 1) * F], src=t)
    return out


@nki.jit
def gpsimd_stream(state, F):
    """Loads `state` ([P, 6] uint32) into the GpSimd generators of lanes 0..P-1, draws [P, F] and
    returns the draws and the state after them."""
    P = state.shape[0]
    s = nl.ndarray((P, 6), nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=state)
    nisa.rand_set_state(src_seeds=s, engine=nisa.gpsimd_engine)
    t = nl.ndarray((P, F), nl.uint32, buffer=nl.sbuf)
    nisa.rng(dst=t, engine=nisa.engine.gpsimd)
    after = nl.ndarray((P, 6), nl.uint32, buffer=nl.sbuf)
    nisa.rand_get_state(dst=after, engine=nisa.gpsimd_engine)
    return _store(t), _store(after)


def _x():
    return np.zeros((1, 1), np.float32)


# ---------------------------------------------------------------------------------------------
# The generator itself


@pytest.mark.parametrize("P,F", [(128, 37), (5, 300)])
def test_gpsimd_stream_is_xorwow_from_the_loaded_state(P, F):
    rs = np.random.default_rng(P)
    state = rs.integers(0, 2**32, (P, 6), dtype=np.uint64).astype(np.uint32)
    got, after = (np.asarray(a) for a in gpsimd_stream(state, F))
    ref = state.copy()
    np.testing.assert_array_equal(got, xorwow(ref, F))
    np.testing.assert_array_equal(after, ref)  # rand_get_state: the state after F draws


def test_vector_stream_after_set_rng_seed_is_the_documented_expansion():
    got = np.asarray(rng_kernel(_x(), 128, 50, nl.uint32, nisa.engine.vector, 1, 1234))
    np.testing.assert_array_equal(got, vector_draws(vector_seed_state(1234), 50))


def test_default_state_is_seed_of_the_core():
    """Without a seed, a launch starts from the state of physical core 0: Vector as
    set_rng_seed(0), GpSimd from the documented keys."""
    v = np.asarray(rng_kernel(_x(), 128, 9, nl.uint32, nisa.engine.vector, 1, None))
    np.testing.assert_array_equal(v, vector_draws(vector_seed_state(0), 9))
    g = np.asarray(rng_kernel(_x(), 128, 9, nl.uint32, nisa.engine.gpsimd, 1, None))
    np.testing.assert_array_equal(g, xorwow(gpsimd_default_state(0), 9))


@pytest.mark.parametrize("dtype,np_dtype", [(nl.int8, np.int8), (nl.uint16, np.uint16), (nl.int32, np.int32)])
def test_rng_truncates_to_the_low_bits(dtype, np_dtype):
    got = np.asarray(rng_kernel(_x(), 32, 20, dtype, nisa.engine.vector, 1, 7))
    full = vector_draws(vector_seed_state(7, range(32)), 20)
    np.testing.assert_array_equal(got, full.astype(np_dtype))  # numpy's cast keeps the low bits too


def test_rng_on_a_partition_range_uses_those_lanes():
    @nki.jit
    def k(x):
        t = nl.ndarray((128, 6), nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=t[32:64, :])
        return _store(t[32:64, :])

    np.testing.assert_array_equal(np.asarray(k(_x())), vector_draws(vector_seed_state(0, range(32, 64)), 6))


# ---------------------------------------------------------------------------------------------
# Reproducibility and state


def test_same_seed_same_numbers_different_seed_different_numbers():
    a = np.asarray(rng_kernel(_x(), 128, 64, nl.uint32, nisa.engine.vector, 1, 42))
    b = np.asarray(rng_kernel(_x(), 128, 64, nl.uint32, nisa.engine.vector, 1, 42))
    c = np.asarray(rng_kernel(_x(), 128, 64, nl.uint32, nisa.engine.vector, 1, 43))
    np.testing.assert_array_equal(a, b)
    assert (a != c).mean() > 0.99


def test_kernel_run_twice_gives_the_same_numbers():
    """Each launch starts from the core's default state: the first (checked) and later
    (planned) runs agree, on both engines."""
    for eng in (nisa.engine.vector, nisa.engine.gpsimd):
        runs = [np.asarray(rng_kernel(_x(), 64, 33, nl.uint32, eng, 2, None)) for _ in range(3)]
        np.testing.assert_array_equal(runs[0], runs[1])
        np.testing.assert_array_equal(runs[0], runs[2])


def test_state_persists_across_instructions():
    got = np.asarray(rng_kernel(_x(), 16, 10, nl.uint32, nisa.engine.gpsimd, 3, None))
    want = xorwow(gpsimd_default_state(0, range(16)), 30)
    np.testing.assert_array_equal(got, want)  # three calls: one stream, no restart
    assert not np.array_equal(got[:, :10], got[:, 10:20])


def test_nl_random_seed_resets_the_stream_of_nl_rand():
    """The documented example: the same seed before each nl.rand gives equal tiles."""

    @nki.jit
    def k(x):
        seed = nl.full((1, 1), 42, dtype=nl.int32, buffer=nl.sbuf)
        nl.random_seed(seed)
        a = nl.rand((128, 512), dtype=nl.float32)
        nl.random_seed(seed)
        b = nl.rand((128, 512), dtype=nl.float32)
        c = nl.rand((128, 512), dtype=nl.float32)
        return _store(a), _store(b), _store(c)

    a, b, c = (np.asarray(t) for t in k(_x()))
    np.testing.assert_array_equal(a, b)
    assert (a != c).mean() > 0.99
    np.testing.assert_array_equal(a, unit(vector_draws(vector_seed_state(42), 512)))


@nki.jit
def save_draw_restore_draw(x, F):
    """Saves the GpSimd state, draws a, restores the state, draws b (== a), draws c."""
    saved = nl.ndarray((128, 6), nl.uint32, buffer=nl.sbuf)
    nisa.rand_get_state(dst=saved)
    outs = []
    for restore in (False, True, False):
        if restore:
            nisa.rand_set_state(src_seeds=saved)
        t = nl.ndarray((128, F), nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=t, engine=nisa.gpsimd_engine)
        outs.append(_store(t))
    return tuple(outs)


def test_get_set_state_round_trip_resumes_the_stream():
    a, b, c = (np.asarray(t) for t in save_draw_restore_draw(_x(), 24))
    np.testing.assert_array_equal(a, b)
    ref = gpsimd_default_state(0)
    xorwow(ref, 24)
    np.testing.assert_array_equal(c, xorwow(ref, 24))  # c continues after b


def test_state_saved_by_one_kernel_resumes_in_another():
    """The public library's pattern: a state read back to HBM, loaded again later."""
    state = gpsimd_default_state(5)
    first, after = (np.asarray(a) for a in gpsimd_stream(state, 40))
    second, _ = (np.asarray(a) for a in gpsimd_stream(after, 40))
    np.testing.assert_array_equal(np.concatenate([first, second], 1), xorwow(state.copy(), 80))


@nki.jit
def per_lane_seeded(seeds, n):
    """The public NKI Library's rng idioms, written here: one [1, 6] state broadcast over the 128
    GpSimd lanes, lane p offset by p * stride (iota channel_multiplier, uint32 add), loaded with
    rand_set_state; int32 draws of all lanes in sequential tiles; the seeds echoed back as an int32
    view of a uint32 output."""
    seed = nl.ndarray((1, 6), nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=seed, src=seeds)
    state = nl.broadcast_to(seed, (128, 6))
    offs = nl.ndarray((128, 6), nl.uint32, buffer=nl.sbuf)
    nisa.iota(dst=offs, pattern=[[0, 6]], offset=0, channel_multiplier=0x9E3779)
    lanes = nl.ndarray((128, 6), nl.uint32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=lanes, data1=state, data2=offs, op=nl.add)
    nisa.rand_set_state(src_seeds=lanes, engine=nisa.gpsimd_engine)
    out = nl.ndarray((1, 128 * n * 2), nl.int32, buffer=nl.shared_hbm)
    for i in nl.sequential_range(2):
        t = nl.ndarray((128, n), nl.int32, buffer=nl.sbuf)
        nisa.rng(dst=t, engine=nisa.engine.gpsimd)
        nisa.dma_copy(dst=out[0, i * 128 * n : (i + 1) * 128 * n].reshape((128, n)), src=t)
    echo = nl.ndarray((1, 6), nl.uint32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=echo, src=seed)
    return out, echo.view(nl.int32)


def test_per_lane_seeding_as_the_public_library_does():
    seeds = np.random.default_rng(42).integers(1, 2**31, (1, 6)).astype(np.uint32)
    out, echo = per_lane_seeded(seeds, 16)
    assert echo.dtype == np.int32
    np.testing.assert_array_equal(echo, seeds.view(np.int32))
    state = (seeds.astype(np.uint64) + np.arange(128, dtype=np.uint64)[:, None] * 0x9E3779).astype(np.uint32)
    ref = xorwow(state, 32)  # two tiles of 16 per lane, one stream
    want = np.concatenate([ref[:, :16].reshape(-1), ref[:, 16:].reshape(-1)]).view(np.int32)
    np.testing.assert_array_equal(np.asarray(out).reshape(-1), want)
    assert len(np.unique(np.asarray(out))) == out.size  # 128 distinct streams


def test_vector_state_round_trip_on_trn3():
    @nki.jit(platform_target="trn3")
    def k(x):
        s = nl.ndarray((128, 24), nl.uint32, buffer=nl.sbuf)
        nisa.rand_get_state(dst=s, engine=nisa.vector_engine)
        a = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.rand2(dst=a, min=-2.0, max=2.0)
        nisa.rand_set_state(src_seeds=s, engine=nisa.vector_engine)
        b = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.rand2(dst=b, min=-2.0, max=2.0)
        return _store(s), _store(a), _store(b)

    s, a, b = (np.asarray(t) for t in k(_x()))
    np.testing.assert_array_equal(s, vector_seed_state(0).reshape(128, 24))
    np.testing.assert_array_equal(a, b)
    want = np.float32(-2.0) + unit(vector_draws(vector_seed_state(0), 16)) * np.float32(4.0)
    np.testing.assert_array_equal(a, want)


# ---------------------------------------------------------------------------------------------
# Multi-core: every physical core has its own generators


def test_lnc2_cores_have_their_own_streams_and_later_instances_continue_them():
    @nki.jit
    def k(x):
        out = nl.ndarray((4, 8, 12), nl.uint32, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.ndarray((8, 12), nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=t, engine=nisa.gpsimd_engine)
        nisa.dma_copy(dst=out[i], src=t)
        return out

    got = np.asarray(k[4](_x()))  # LNC=2: instances 0, 1 on cores 0, 1; then 2, 3
    for core in (0, 1):
        ref = gpsimd_default_state(core, range(8))
        np.testing.assert_array_equal(got[core], xorwow(ref, 12))
        np.testing.assert_array_equal(got[core + 2], xorwow(ref, 12))  # core's next instance
    assert (got[0] != got[1]).mean() > 0.99


def test_lnc1_grid_instances_continue_one_core_stream(monkeypatch):
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")

    @nki.jit
    def k(x):
        out = nl.ndarray((3, 8, 5), nl.uint32, buffer=nl.shared_hbm)
        t = nl.ndarray((8, 5), nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=t, engine=nisa.gpsimd_engine)
        nisa.dma_copy(dst=out[nl.program_id(0)], src=t)
        return out

    got = np.asarray(k[3](_x()))  # one physical core runs the three instances in turn
    ref = xorwow(gpsimd_default_state(0, range(8)), 15)
    np.testing.assert_array_equal(got, ref.reshape(8, 3, 5).transpose(1, 0, 2))


def test_lnc2_vector_generators_start_from_the_core_seed():
    @nki.jit
    def k(x):
        out = nl.ndarray((2, 16, 10), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[nl.program_id(0)], src=nl.rand((16, 10), dtype=nl.float32))
        return out

    got = np.asarray(k[2](_x()))
    for core in (0, 1):
        np.testing.assert_array_equal(got[core], unit(vector_draws(vector_seed_state(core, range(16)), 10)))


# ---------------------------------------------------------------------------------------------
# Dropout


@nki.jit
def dropout_kernel(x, prob, seed):
    s = nl.full((1, 1), seed, dtype=nl.uint32, buffer=nl.sbuf)
    nisa.set_rng_seed(src_seeds=s)
    t = nl.load(x)
    if isinstance(prob, float):
        p = prob
    else:
        p = nl.load(prob)
    o = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
    nisa.dropout(dst=o, data=t, prob=p)
    return _store(o)


def test_dropout_keeps_one_minus_p_unscaled_and_matches_the_reference():
    x = np.random.default_rng(0).uniform(1.0, 2.0, (128, 1024)).astype(np.float32)
    got = np.asarray(dropout_kernel(x, 0.3, 11))
    kept = got != 0
    assert abs(kept.mean() - 0.7) < 0.01  # 131072 draws: 0.01 is ~7 standard deviations
    np.testing.assert_array_equal(got[kept], x[kept])  # kept values are not rescaled
    want_kept = unit(vector_draws(vector_seed_state(11), 1024)) >= np.float32(0.3)
    np.testing.assert_array_equal(kept, want_kept)


def test_dropout_zero_keeps_all_one_drops_all():
    x = np.random.default_rng(1).normal(size=(64, 256)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(dropout_kernel(x, 0.0, 3)), x)
    np.testing.assert_array_equal(np.asarray(dropout_kernel(x, 1.0, 3)), np.zeros_like(x))


def test_dropout_per_partition_probability_and_integer_data():
    x = np.arange(1, 128 * 512 + 1, dtype=np.int32).reshape(128, 512)
    prob = (np.arange(128, dtype=np.float32) / 127).reshape(128, 1)
    got = np.asarray(dropout_kernel(x, prob, 5))
    kept_rate = (got != 0).mean(axis=1)
    assert kept_rate[0] == 1.0 and kept_rate[127] == 0.0
    assert np.abs(kept_rate - (1 - prob[:, 0])).max() < 0.1
    kept = got != 0
    np.testing.assert_array_equal(got[kept], x[kept])


def test_old_style_nisa_dropout_returns_a_tile():
    """The documented old example: c = nisa.dropout(a, prob=b) with b a [128, 1] tile, and
    nisa.dropout(a, prob=0.2)."""

    @nki.jit
    def k(a_in, b_in):
        a = nl.load(a_in)
        b = nl.load(b_in)
        c = nisa.dropout(a, prob=b)
        d = nisa.dropout(a, 0.2, dtype=nl.bfloat16)
        return _store(c), _store(d)

    a = np.random.default_rng(2).random((128, 512)).astype(np.float32) + 1
    b = np.full((128, 1), 0.5, np.float32)
    c, d = (np.asarray(t, dtype=np.float32) for t in k(a, b))
    assert abs((c == 0).mean() - 0.5) < 0.02 and abs((d == 0).mean() - 0.2) < 0.02
    kept = d != 0
    np.testing.assert_array_equal(d[kept], a.astype(nl.bfloat16).astype(np.float32)[kept])


def test_old_style_dropout_with_an_index_grid_mask():
    @nki.jit
    def k(x):
        ix, iy = nl.mgrid[0:128, 0:64]
        t = nl.load(x)
        z = nl.zeros((128, 64), nl.float32)
        z[ix, iy] = nisa.dropout(t[ix, iy], prob=0.0, mask=(ix < 64))
        return _store(z)

    got = np.asarray(k(np.full((128, 64), 3.0, np.float32)))
    np.testing.assert_array_equal(got[:64], 3.0)  # prob 0 keeps the masked rows
    np.testing.assert_array_equal(got[64:], 0.0)  # the rest is not written


def test_nl_dropout_with_inverted_scaling_as_flash_attention_does():
    """nki-samples' flash attention: seed + offset -> nl.random_seed, nl.dropout with a
    per-partition rate tile, then multiply by 1 / (1 - p)."""

    @nki.jit
    def k(x, seed):
        p = 0.25
        rate = nl.full((128, 1), fill_value=p, dtype=np.float32)
        seed_local = nl.load(seed[0])
        outs = []
        for i in range(2):
            offset_seed = nl.add(seed_local, i, dtype=nl.int32)
            nl.random_seed(seed=offset_seed)
            d = nl.dropout(nl.load(x), rate=rate[:, 0])
            outs.append(_store(nl.multiply(d, 1 / (1 - p))))
        return tuple(outs)

    x = np.ones((128, 256), np.float32)
    a, b = (np.asarray(t) for t in k(x, np.array([17], np.int32)))
    assert set(np.unique(a)) == {0.0, np.float32(1 / 0.75)}
    assert abs(a.mean() - 1.0) < 0.02  # inverted dropout keeps the expectation
    assert (a != b).any()  # seeds 17 and 18 give different masks
    want = np.where(unit(vector_draws(vector_seed_state(18), 256)) >= np.float32(0.25), np.float32(1 / 0.75), 0)
    np.testing.assert_array_equal(b, want.astype(np.float32))


# ---------------------------------------------------------------------------------------------
# Uniform values


def test_nl_rand_is_uniform_in_unit_interval():
    @nki.jit
    def k(x):
        nl.random_seed(nl.full((1, 1), 2026, dtype=nl.int32, buffer=nl.sbuf))
        return _store(nl.rand((128, 2048), dtype=nl.float32))

    u = np.asarray(k(_x())).reshape(-1)
    assert u.min() >= 0.0 and u.max() < 1.0
    n = u.size
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    hist = np.histogram(u, bins=16, range=(0, 1))[0]
    assert np.abs(hist / (n / 16) - 1).max() < 0.03  # 16384 per bin: 3% is ~4 standard deviations


def test_nl_rand_gives_the_same_values_on_trn2_and_trn3():
    def k(x):
        return _store(nl.rand((64, 40), dtype=nl.float32))

    v3 = np.asarray(nki.jit(platform_target="trn2")(k)(_x()))
    v4 = np.asarray(nki.jit(platform_target="trn3")(k)(_x()))
    np.testing.assert_array_equal(v3, v4)
    np.testing.assert_array_equal(v3, unit(vector_draws(vector_seed_state(0, range(64)), 40)))


def test_rand2_with_per_partition_bounds_and_integer_output():
    @nki.jit(platform_target="trn3")
    def k(lo_in, hi_in):
        lo, hi = nl.load(lo_in), nl.load(hi_in)
        a = nl.ndarray((128, 300), nl.float32, buffer=nl.sbuf)
        nisa.rand2(dst=a, min=lo, max=hi)
        b = nl.ndarray((128, 300), nl.int32, buffer=nl.psum)
        nisa.rand2(b, -5.0, 5.0)
        return _store(a), _store(nl.copy(b))

    lo = np.arange(128, dtype=np.float32).reshape(128, 1)
    hi = lo + np.float32(0.5)
    a, b = (np.asarray(t) for t in k(lo, hi))
    draws = vector_draws(vector_seed_state(0), 600)
    want = lo + unit(draws[:, :300]) * (hi - lo)  # b continues with the next 300 draws
    np.testing.assert_array_equal(a, want.astype(np.float32))
    assert (a >= lo).all() and (a <= hi).all()
    assert b.min() >= -5 and b.max() <= 5 and len(np.unique(b)) == 11


# ---------------------------------------------------------------------------------------------
# Targets and rules


def _rule_kernel(build, target="trn2"):
    def k(x):
        build()
        return x

    return nki.jit(platform_target=target)(k)


@pytest.mark.parametrize(
    "build,target,fragment",
    [
        (lambda: nisa.rand2(dst=nl.ndarray((8, 8), nl.float32, buffer=nl.sbuf), min=0.0, max=1.0), "trn2",
         "rand2 needs NeuronCore-v4 or newer (trn3)"),
        (lambda: nisa.rng(dst=nl.ndarray((8, 8), nl.uint32, buffer=nl.sbuf), engine=nisa.gpsimd_engine), "trn1",
         "rng runs on the Vector Engine on NeuronCore-v2"),
        (lambda: nisa.rand_set_state(src_seeds=nl.ndarray((8, 6), nl.uint32, buffer=nl.sbuf)), "trn1",
         "rand_set_state needs NeuronCore-v3"),
        (lambda: nisa.rand_get_state(dst=nl.ndarray((8, 24), nl.uint32, buffer=nl.sbuf), engine=nisa.vector_engine),
         "trn2", "rand_get_state runs on the GpSimd Engine on NeuronCore-v3"),
        (lambda: nisa.rand_set_state(src_seeds=nl.ndarray((8, 24), nl.uint32, buffer=nl.sbuf)), "trn2",
         "XORWOW state of a GpSimd lane is 6 uint32"),
        (lambda: nisa.rand_get_state(dst=nl.ndarray((8, 6), nl.uint32, buffer=nl.sbuf), engine=nisa.vector_engine),
         "trn3", "XORWOW state of a Vector lane is 24 uint32"),
        (lambda: nisa.rand_set_state(src_seeds=nl.ndarray((8, 6), nl.int32, buffer=nl.sbuf)), "trn2",
         "rand_set_state seeds are uint32"),
        (lambda: nisa.rand_get_state(dst=nl.ndarray((8, 6), nl.uint32, buffer=nl.psum)), "trn2",
         "GpSimd Engine cannot access"),
        (lambda: nisa.rng(dst=nl.ndarray((8, 8), nl.float32, buffer=nl.sbuf)), "trn2",
         "rng writes int8/int16/int32/uint8/uint16/uint32"),
        (lambda: nisa.rng(dst=nl.ndarray((8, 8), nl.uint32, buffer=nl.psum), engine=nisa.gpsimd_engine), "trn2",
         "GpSimd Engine cannot access"),
        (lambda: nisa.set_rng_seed(src_seeds=nl.ndarray((2, 1), nl.int32, buffer=nl.sbuf)), "trn2",
         "set_rng_seed takes a [1, 1] seed"),
        (lambda: nisa.set_rng_seed(src_seeds=nl.ndarray((1, 1), nl.int16, buffer=nl.sbuf)), "trn2",
         "set_rng_seed takes a 32-bit seed"),
        (lambda: nisa.dropout(dst=nl.ndarray((8, 8), nl.bfloat16, buffer=nl.sbuf),
                              data=nl.ndarray((8, 8), nl.float32, buffer=nl.sbuf), prob=0.5), "trn2",
         "dst.dtype == data.dtype"),
        (lambda: nisa.dropout(dst=nl.ndarray((8, 8), nl.int32, buffer=nl.sbuf),
                              data=nl.ndarray((8, 8), nl.int32, buffer=nl.sbuf),
                              prob=nl.ndarray((8, 1), nl.bfloat16, buffer=nl.sbuf)), "trn2",
         "float32 for integer data"),
        (lambda: nisa.rand2(dst=nl.ndarray((8, 8), nl.float32, buffer=nl.sbuf), min=1.0, max=1.0), "trn3",
         "rand2 needs min < max"),
    ],
)
def test_rules(build, target, fragment):
    with pytest.raises(NkiValidationError) as ei:
        _rule_kernel(build, target)(_x())
    assert fragment in str(ei.value), str(ei.value)


def test_rand2_on_trn2_names_the_target():
    with pytest.raises(NkiValidationError) as ei:
        _rule_kernel(lambda: nisa.rand2(dst=nl.ndarray((8, 8), nl.float32, buffer=nl.sbuf), min=0.0, max=1.0))(_x())
    msg = str(ei.value)
    assert "nki.isa.rand2" in msg and "NeuronCore-v3" in msg, msg


def test_random_seed_needs_a_tensor():
    with pytest.raises(TypeError, match=r"random_seed requires a \[1, 1\] tensor"):
        _rule_kernel(lambda: nl.random_seed(42))(_x())


def test_set_rng_seed_from_never_written_memory_is_an_error():
    @nki.jit
    def k(x):
        s = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.set_rng_seed(src_seeds=s)
        return _store(nl.rand((4, 4)))

    with pytest.raises(NkiValidationError, match="set_rng_seed seeds the Vector Engine.s generators from never-written"):
        nki.simulate(k)(_x())


def test_cost_model_prices_random_instructions():
    def k(x):
        t = nl.ndarray((128, 4096), nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=t)
        return _store(t[0:1, 0:1])

    ns = {}
    for target in ("trn2", "trn3"):
        ns[target] = nki.estimate(nki.jit(platform_target=target)(k), _x()).busy_ns["Vector"]
    assert ns["trn3"] < ns["trn2"] / 3  # NeuronCore-v4 draws four values per lane per cycle
