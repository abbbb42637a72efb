"""Elastic refit (reshard_elastic.h): a lost rank does not stop the others.

After ``plan.execute`` raised ReshardError with Status.TIMEOUT (a peer stopped or
died), every survivor::

    gone = reshard.elastic.agree_gone(comm)                    # the same list everywhere
    comm2 = reshard.elastic.shrink(comm, gone)                 # MPI_Comm_create_group / ncclCommShrink
    src2, dst2 = reshard.elastic.membership_layouts(src, dst, gone)
    plan2 = reshard.Plan(src2, dst2, rank=rank, world=world)   # same world, same ranks
    plan2.delta_adopt(plan)   # delta: survivors keep their versions (docs/delta-reference.md)
    plan2.execute(comm2, src=..., dst=...)

Plans keep the original layout ranks (and their NVLink domains); a shrunken comm is a
view mapping them to the survivors' communicator. A restarted rank rejoins through
any new communicator wrapped by ``view`` and a plan that includes it. Growing back: over
MPI ``grow_mpi`` on the members and ``join_mpi`` on new processes (an intercommunicator
from Spawn or Accept/Connect); over NCCL ``rejoin_nccl`` (a fresh unique id through the
key-value store). The C library does all of it; this module only calls it.
"""

import ctypes

from . import _lib
from .comm import Comm, _open_mpi_comms
from .comm import from_nccl_store as _from_nccl_store
from .errors import Status, error
from .layout import Layout

_P, _vp, _i32 = ctypes.POINTER, _lib.c_vp, _lib.c_i32
_SIGNATURES = {
    "reshard_membership_layouts": [_vp, _vp, _P(_i32), _i32, _P(_vp), _P(_vp)],
    "reshard_comm_unresponsive": [_vp, _P(_i32), _i32, _P(_i32)],
    "reshard_comm_agree_gone": [_vp, ctypes.c_double, _P(_i32), _i32, _P(_i32)],
    "reshard_comm_create_view": [_vp, _i32, _P(_i32), _P(_vp)],
    "reshard_comm_shrink_inproc": [_vp, _P(_i32), _i32, _vp, _P(_vp)],
    "reshard_comm_shrink_mpi": [_vp, _P(_i32), _i32, _P(_vp)],
    "reshard_comm_shrink_nccl": [_vp, _P(_i32), _i32, _P(_vp)],
}
for _name, _args in _SIGNATURES.items():
    _fn = getattr(_lib.lib, _name, None)
    if _fn is not None:
        _fn.restype, _fn.argtypes = ctypes.c_int, _args


_I32_MIN, _I32_MAX = _lib.I32_MIN, _lib.I32_MAX
_int = _lib.as_int


def _ranks(ranks, what="ranks", lo=0):
    """A list of plan ranks (ints in [lo, 2**31 - 1]) as an int32 array and its count."""
    if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
        raise TypeError("reshard: %s must be a list of ints, got %r" % (what, ranks))
    ranks = [_int(r, "%s[%d]" % (what, i), lo=lo) for i, r in enumerate(ranks)]
    return (_i32 * max(len(ranks), 1))(*ranks), len(ranks)


def _need(name):
    if not _lib.has(name):
        raise error(Status.UNSUPPORTED, "this libreshard has no %s" % name)
    return getattr(_lib.lib, name)


def membership_layouts(src, dst, gone):
    """Copies of ``src`` and ``dst`` without the fragments and declared buffers of the
    ``gone`` ranks (reshard_membership_layouts). Raises ReshardError UNCOVERED naming
    the tensor, the box and the lost ranks when a surviving destination element lost
    every replica."""
    if not isinstance(src, Layout) or not isinstance(dst, Layout):
        raise TypeError("reshard: membership_layouts(src, dst, gone) needs two reshard.Layout")
    arr, n = _ranks(gone, "gone")
    s, d = _vp(), _vp()
    _lib.check(_need("reshard_membership_layouts")(src._h, dst._h, arr, n, ctypes.byref(s),
                                                   ctypes.byref(d)))
    out = []
    for lay, h in ((src, s), (dst, d)):
        l2 = Layout(lay.tensors, _handle=h.value)
        l2._owned = True  # made by the C call: this object frees it
        out.append(l2)
    return tuple(out)


def unresponsive(comm):
    """The peers this rank found unresponsive in its last failed execution (sorted);
    a hint for logs: agree_gone decides by liveness."""
    fn = _need("reshard_comm_unresponsive")
    n = _i32()
    _lib.check(fn(comm._h, None, 0, ctypes.byref(n)))
    arr = (_i32 * max(n.value, 1))()
    _lib.check(fn(comm._h, arr, n.value, ctypes.byref(n)))
    return list(arr[:n.value])


AGREE_GONE_TIMEOUT_S = 0.05
"""RESHARD_AGREE_GONE_TIMEOUT_S: the agreement's default timeout (seconds)."""


def agree_gone(comm, timeout_s=AGREE_GONE_TIMEOUT_S):
    """Agree with the other survivors on the lost ranks (reshard_comm_agree_gone): every
    survivor gets the same sorted list or a ReshardError (never two groups that each go
    on: a rank counted lost by the others, a differing set or no quorum of the members
    raises). Survivors must enter within 2 * timeout_s of each other; a failed execution
    releases them together, so the short default suits an idle host (pass more, e.g.
    0.5, on a loaded one). Takes about 2 * timeout_s plus a round trip, at most
    4 * timeout_s. ``timeout_s``: a real number in (0, 1e9) (bool and str refused)."""
    if isinstance(timeout_s, (bool, str, bytes)) or not hasattr(timeout_s, "__float__"):
        raise TypeError("reshard: agree_gone timeout_s must be a number of seconds, got %r"
                        % (timeout_s,))
    t = float(timeout_s)
    if not 0 < t < 1e9:  # also NaN
        raise ValueError("reshard: agree_gone timeout_s = %r is not in (0, 1e9) seconds"
                         % (timeout_s,))
    fn = _need("reshard_comm_agree_gone")
    arr = (_i32 * max(comm.size, 1))()
    n = _i32()
    _lib.check(fn(comm._h, t, arr, comm.size, ctypes.byref(n)))
    return list(arr[:n.value])


def _wrap(handle, like):
    c = Comm(handle, like.kind, like.device, keep=like._keep)
    if like.kind == "mpi":
        _open_mpi_comms.add(c)
    return c


def shrink(comm, gone, survivors=None):
    """The comm of the membership without ``gone`` (plan ranks), made by the survivors
    only: MPI_Comm_create_group for an MPI comm, ncclCommShrink for an NCCL one, and for
    an in-process one a new InprocGroup ``survivors`` of the survivors' count. Returns a
    view whose rank and size are the plan rank and world; ``comm`` stays the caller's
    to close."""
    arr, n = _ranks(gone, "gone")
    h = _vp()
    if comm.kind == "inproc":
        if survivors is None:
            raise TypeError("reshard: shrink of an in-process comm needs survivors=InprocGroup")
        _lib.check(_need("reshard_comm_shrink_inproc")(comm._h, arr, n, survivors._h,
                                                       ctypes.byref(h)))
        c = Comm(h.value, "inproc", "cpu", keep=survivors)
        survivors._comms.append(c)
        return c
    fn = {"mpi": "reshard_comm_shrink_mpi", "nccl": "reshard_comm_shrink_nccl"}[comm.kind]
    _lib.check(_need(fn)(comm._h, arr, n, ctypes.byref(h)))
    return _wrap(h.value, comm)


def view(inner, world, rank_map):
    """Rejoin: ``inner`` (a Comm over any new communicator, e.g. a new InprocGroup, an
    mpi4py intercommunicator merged with Intercomm_merge, a fresh NCCL id through a
    store) seen as a comm of ``world`` plan ranks; ``rank_map[p]`` is the inner rank of
    plan rank p, or -1. ``inner`` is taken over (closing the view closes it)."""
    world = _int(world, "world", lo=1)
    arr, n = _ranks(rank_map, "rank_map", lo=-1)
    if n != world:
        raise ValueError("reshard: rank_map needs %d entries, got %d" % (world, n))
    h = _vp()
    fn = _need("reshard_comm_create_view")
    status = fn(inner._h, int(world), arr, ctypes.byref(h))
    inner_h, inner._h = inner._h, None  # the C call owns it now, also on error
    del inner_h
    _lib.check(status)
    return _wrap(h.value, inner)


def _mpi_handle_type():
    from mpi4py import MPI
    # MPI_Comm is passed by value: a pointer in Open MPI, an int in MPICH.
    return _vp if MPI._sizeof(MPI.Comm) == ctypes.sizeof(_vp) else ctypes.c_int


def grow_mpi(comm, intercomm, joining):
    """Growing back over MPI, the members' side (reshard_comm_grow_mpi): ``intercomm``
    (mpi4py) joins the members of ``comm`` (a view from shrink) with new processes, made
    e.g. by ``Spawn`` over an mpi4py communicator of the members (``Create_group`` of
    COMM_WORLD without the lost ranks); remote process i takes plan rank
    ``joining[i]``. The new processes call join_mpi. Returns the comm of the grown
    membership (a view of the same world); ``comm`` stays the caller's to close."""
    from mpi4py import MPI
    fn = _need("reshard_comm_grow_mpi")
    ht = _mpi_handle_type()
    fn.argtypes = [_vp, ht, _P(_i32), _i32, _P(_vp)]
    arr, n = _ranks(joining, "joining")
    h = _vp()
    _lib.check(fn(comm._h, ht(MPI._handleof(intercomm)), arr, n, ctypes.byref(h)))
    return _wrap(h.value, comm)


def join_mpi(intercomm):
    """Growing back over MPI, a new process's side (reshard_comm_join_mpi): join the
    members at the other end of ``intercomm`` (``MPI.Comm.Get_parent()`` after a spawn).
    The comm's rank is the plan rank taken, its size the plan world."""
    from mpi4py import MPI
    fn = _need("reshard_comm_join_mpi")
    ht = _mpi_handle_type()
    fn.argtypes = [ht, _P(_vp)]
    h = _vp()
    _lib.check(fn(ht(MPI._handleof(intercomm)), ctypes.byref(h)))
    c = Comm(h.value, "mpi", "cpu", keep=intercomm)
    _open_mpi_comms.add(c)
    return c


def rejoin_key(generation):
    """The store key of the unique id of rejoin number ``generation``: every rejoin
    needs a fresh NCCL id, so a key of its own (a store keeps old ids)."""
    return "reshard/nccl_unique_id/rejoin/%d" % int(generation)


def membership_map(world, members):
    """For a membership ``members`` (plan ranks): the rank map of view() (plan rank ->
    rank in the members' communicator, members numbered in increasing plan-rank order,
    -1 for the others)."""
    world = _int(world, "world", lo=1)
    _ranks(members, "members")
    members = sorted(set(m.__index__() for m in members))
    if not members or members[0] < 0 or members[-1] >= world:
        raise error(Status.RANK, "membership %s outside the plan world of %d" % (members, world))
    index = {p: i for i, p in enumerate(members)}
    return [index.get(p, -1) for p in range(world)]


def rejoin_nccl(store, rank, world, members, generation, device=None, stream=None):
    """Rejoin over NCCL: every process of the new membership ``members`` (plan ranks;
    survivors and restarted ones) calls it with its plan ``rank`` and the same
    ``generation``. The lowest member makes a fresh NCCL unique id and sets it in
    ``store`` under rejoin_key(generation); the others get it; all make the NCCL
    communicator of the members (ranks in plan-rank order, from_nccl_store) and wrap
    it as a view of ``world`` plan ranks. Then plan for the membership (the original
    layouts when it is complete): a restarted rank's buffers are refit completely on
    its first execution. Survivors close their old (shrunken) comm themselves."""
    rank_map = membership_map(world, members)
    if not 0 <= rank < world or rank_map[rank] < 0:
        raise error(Status.RANK, "plan rank %d is not in the membership %s" % (rank, members))
    inner = _from_nccl_store(store, rank_map[rank], sum(1 for q in rank_map if q >= 0),
                             key=rejoin_key(generation), device=device, stream=stream)
    return view(inner, world, rank_map)
