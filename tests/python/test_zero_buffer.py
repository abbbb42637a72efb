"""Zero-filled destination buffers (Layout.zero_buffer): a parameter the engine holds
at zero on a rank that no source sends (vLLM's gpt-oss w2_bias without EP). Every
refit, dense or delta, leaves it all zeros whatever it held; a missing one is refused
on every rank before anything moves."""

import numpy as np
import pytest

import reshard


def layouts():
    tensors = reshard.Tensors()
    tensors.add("w", (8, 4), np.float32)
    src, dst = reshard.Layout(tensors), reshard.Layout(tensors)
    src.add_fragment("w", 0, 0, (0, 0), (8, 4))
    dst.add_fragment("w", 1, 0, (0, 0), (8, 4))
    dst.declare_buffer(1, 0, "w", "fp32", (8, 4))
    dst.declare_buffer(1, 1, "bias", "fp32", (2, 8))
    dst.zero_buffer(1, 1)
    return tensors, src, dst


@pytest.mark.parametrize("delta", [False, True], ids=["dense", "delta"])
def test_zeros_written_every_refit(delta):
    tensors, src, dst = layouts()
    seen = []

    def rank_fn(comm):
        plan = reshard.Plan(src, dst, rank=comm.rank, world=2, delta=delta)
        w = np.full((8, 4), np.nan, np.float32)
        bias = np.empty((2, 8), np.float32)
        for step in range(3):
            vals = (np.arange(32, dtype=np.float32) + 10 * step).reshape(8, 4)
            if comm.rank == 0:
                plan.execute(comm, src=[vals])
            else:
                bias[...] = np.random.default_rng(step).standard_normal((2, 8))  # garbage
                plan.execute(comm, dst={"w": w, "bias": bias})
                seen.append((np.array_equal(w, vals), bias.copy()))

    reshard.run_threads(2, rank_fn)
    assert len(seen) == 3
    for ok, bias in seen:
        assert ok
        assert bias.tobytes() == bytes(bias.nbytes)  # every byte 0 (+0.0)


def test_missing_zero_buffer_refused_on_every_rank():
    tensors, src, dst = layouts()
    errors, w = {}, np.full((8, 4), 7.0, np.float32)

    def rank_fn(comm):
        plan = reshard.Plan(src, dst, rank=comm.rank, world=2)
        try:
            if comm.rank == 0:
                plan.execute(comm, src=[np.ones((8, 4), np.float32)])
            else:
                plan.execute(comm, dst=[w])
        except reshard.ReshardError as e:
            errors[comm.rank] = e

    reshard.run_threads(2, rank_fn)
    assert sorted(errors) == [0, 1]
    for e in errors.values():
        assert e.status == reshard.Status.BUFFER and "rank 1" in str(e)
    assert (w == 7.0).all()  # nothing written


def test_fragment_in_a_zero_buffer_refused():
    tensors, src, dst = layouts()
    bad = reshard.Layout(tensors)
    bad.add_fragment("w", 1, 0, (0, 0), (8, 4))
    bad.declare_buffer(1, 0, "w", "fp32", (8, 4))
    bad.zero_buffer(1, 0)
    with pytest.raises(reshard.ReshardError, match="declared zero-filled"):
        reshard.Plan(src, bad, rank=0, world=2)
    with pytest.raises(reshard.ReshardError, match="rank 1, buffer 5: not declared"):
        dst.zero_buffer(1, 5)


def test_zero_buffer_overlapping_a_destination_is_refused():
    """A zero-filled buffer is written whole: bound over part of another destination's
    memory, the zeros would overwrite weights. Refused on every rank before anything
    moves, naming both buffers."""
    tensors, src, dst = layouts()
    storage = np.full(32 + 16, 5.0, np.float32)
    errors = {}

    def rank_fn(comm):
        plan = reshard.Plan(src, dst, rank=comm.rank, world=2)
        try:
            if comm.rank == 0:
                plan.execute(comm, src=[np.ones((8, 4), np.float32)])
            else:  # bias starts 8 floats before w ends
                plan.execute(comm, dst={"w": storage[:32].reshape(8, 4),
                                        "bias": storage[24:40].reshape(2, 8)})
        except reshard.ReshardError as e:
            errors[comm.rank] = e

    reshard.run_threads(2, rank_fn)
    assert sorted(errors) == [0, 1], errors
    assert "destination buffers 0 (w) and 1 (bias) share memory" in str(errors[1]), errors[1]
    assert bool((storage == 5.0).all())  # nothing written
