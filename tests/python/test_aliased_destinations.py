"""Destination tensors bound to overlapping memory (two parameters viewing one storage)
are refused before anything moves, on every rank, naming both buffers; a tied weight
bound under both names (one storage, the same elements at the same bytes) still refits.
Sources Shard(0) over ranks 0, 1; destinations whole on rank 2."""

import numpy as np
import pytest

import reshard
from reshard import Replicate, Shard

ROWS, COLS = 64, 32


def full_values(salt):
    return (np.arange(ROWS * COLS, dtype=np.int64) * 7 + salt).astype(np.int32) \
        .reshape(ROWS, COLS)


def run(names, dst_for, delta):
    """Refit tensors ``names`` (each ROWS x COLS int32); rank 2's destinations are
    dst_for(); returns (errors by rank, rank 2's destinations, full values)."""
    tensors = reshard.Tensors()
    for n in names:
        tensors.add(n, (ROWS, COLS), np.int32)
    src = reshard.Layout.from_placements(tensors, {n: ([0, 1], [Shard(0)]) for n in names})
    dst = reshard.Layout.from_placements(tensors, {n: ([2], [Replicate()]) for n in names})
    full = {n: full_values(1000 * i + 1) for i, n in enumerate(names)}
    errors, held = {}, {}
    dests = dst_for()

    def rank_fn(comm):
        r = comm.rank
        plan = reshard.Plan(src, dst, rank=r, world=3, delta=delta)
        s = {n: np.ascontiguousarray(full[n][r * ROWS // 2:(r + 1) * ROWS // 2])
             for n in names} if r < 2 else {}
        try:
            plan.execute(comm, src=s, dst=dests if r == 2 else {})
        except reshard.ReshardError as e:
            errors[r] = e

    reshard.run_threads(3, rank_fn)
    return errors, dests, full


@pytest.mark.parametrize("delta", [False, True])
def test_half_overlapping_destinations_are_refused(delta):
    storage = np.full(ROWS * COLS * 3 // 2, -3, dtype=np.int32)
    half = ROWS * COLS // 2

    def dests():
        return {"a": storage[:ROWS * COLS].reshape(ROWS, COLS),
                "b": storage[half:half + ROWS * COLS].reshape(ROWS, COLS)}
    errors, _, _ = run(["a", "b"], dests, delta)
    assert sorted(errors) == [0, 1, 2], errors
    msg = str(errors[2])
    assert "destination buffers 0 (a) and 1 (b) share memory" in msg, msg
    assert "byte %d of buffer 0 is byte 0 of buffer 1" % (half * 4) in msg, msg
    for r in (0, 1):
        assert "rank 2" in str(errors[r]), errors[r]
    assert bool((storage == -3).all())  # nothing written


def test_a_tied_weight_bound_under_both_names_refits():
    """One logical tensor with its elements in two buffers (embed_tokens and a tied
    lm_head) given one storage for both: the same bytes written twice, exact."""
    tensors = reshard.Tensors()
    tensors.add("embed", (ROWS, COLS), np.int32)
    src = reshard.Layout.from_placements(tensors, {"embed": ([0, 1], [Shard(0)])})
    dst = reshard.Layout(tensors)
    dst.add_dtensor("embed", [2], [Replicate()], buffer=0)
    dst.add_dtensor("embed", [2], [Replicate()], buffer=1)
    full = full_values(5)
    storage = np.full((ROWS, COLS), -3, dtype=np.int32)
    errors = {}

    def rank_fn(comm):
        r = comm.rank
        plan = reshard.Plan(src, dst, rank=r, world=3)
        s = {0: np.ascontiguousarray(full[r * ROWS // 2:(r + 1) * ROWS // 2])} if r < 2 else {}
        try:
            plan.execute(comm, src=[s[0]] if r < 2 else [], dst=[storage, storage] if r == 2
                         else [])
        except reshard.ReshardError as e:
            errors[r] = e

    reshard.run_threads(3, rank_fn)
    assert errors == {}
    assert np.array_equal(storage, full)


@pytest.mark.parametrize("delta", [False, True])
def test_source_and_destination_in_one_memory_are_refused(delta):
    """An in-place reshard: each rank binds one array as its source (rows of w) and,
    reshaped, as its destination (columns of w). The refit would read bytes it already
    wrote: refused (BUFFER) on every rank naming both buffers, before anything moves, so the
    array keeps its values; separate memory refits exactly."""
    rows, cols = 256, 64
    tensors = reshard.Tensors()
    tensors.add("w", (rows, cols), np.int32)
    src = reshard.Layout.from_placements(tensors, {"w": ([0, 1], [Shard(0)])})
    dst = reshard.Layout.from_placements(tensors, {"w": ([0, 1], [Shard(1)])})
    full = (np.arange(rows * cols, dtype=np.int64) * 7 + 3).astype(np.int32).reshape(rows, cols)
    for separate in (False, True):
        errors, arrays, outs = {}, {}, {}

        def rank_fn(comm):
            r = comm.rank
            a = np.ascontiguousarray(full[r * rows // 2:(r + 1) * rows // 2])
            arrays[r] = a
            d = np.zeros((rows, cols // 2), np.int32) if separate else a.reshape(rows, cols // 2)
            outs[r] = d
            plan = reshard.Plan(src, dst, rank=r, world=2, delta=delta, staging_mb=1)
            try:
                plan.execute(comm, src={"w": a}, dst={"w": d})
            except reshard.ReshardError as e:
                errors[r] = e

        reshard.run_threads(2, rank_fn)
        if separate:
            assert errors == {}, errors
            for r in (0, 1):
                assert np.array_equal(outs[r], full[:, r * cols // 2:(r + 1) * cols // 2])
            continue
        assert sorted(errors) == [0, 1], errors
        for r, e in errors.items():
            assert e.status == reshard.Status.BUFFER, str(e)
        for r in (0, 1):
            assert "source buffer 0 (w) and destination buffer 0 (w) share memory" in \
                errors[r].message or "rank %d could not" % (1 - r) in errors[r].message
            assert np.array_equal(arrays[r], full[r * rows // 2:(r + 1) * rows // 2])
