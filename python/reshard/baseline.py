"""The gather+broadcast baseline (reshard_baseline_t, reshard_mpi.h): the refit RL
frameworks do today, built in so that a speedup is a ratio measured in one run."""

import ctypes

from . import _lib
from .buffers import bind, raise_problems
from .plan import comm_open
from .errors import Status, error
from .layout import Layout


class Baseline(_lib.Handle):
    """Gather each tensor to its root (the lowest source rank holding it), broadcast it
    to every destination rank in a pipelined chain, keep each rank's fragments
    (reshard_baseline_create_mpi documents the algorithm and its memory). Every rank
    of ``comm`` (an MPI endpoint, reshard.from_mpi) builds it with the same layouts;
    ``staging_mb`` is the bucket size (default the library's), ``timeout_s`` bounds
    every wait. Errors (ReshardError): UNSUPPORTED when the library has no MPI,
    INVALID_ARG for a comm that is not MPI or a world size that differs from the
    comm's, UNCOVERED, STAGING (a view-dim-0 row larger than the bucket, naming the
    tensor)."""

    _destroy = "reshard_baseline_destroy"

    def __init__(self, src, dst, comm, staging_mb=None, timeout_s=None):
        if not isinstance(src, Layout) or not isinstance(dst, Layout):
            raise TypeError("reshard: Baseline(src, dst, comm) needs two reshard.Layout")
        if not _lib.has("reshard_baseline_create_mpi"):
            raise error(Status.UNSUPPORTED, "this libreshard was built without MPI")
        comm_open(comm)
        if comm.kind != "mpi":
            raise error(Status.INVALID_ARG, "reshard: Baseline runs over an MPI comm "
                        "(reshard.from_mpi), got a %s comm" % comm.kind)
        p = _lib.PlanParams(world_size=comm.size, my_rank=comm.rank)
        if staging_mb is not None:
            p.field_mask |= _lib.PARAM_STAGING_BYTES
            p.staging_bytes = _lib.as_mib_bytes(staging_mb, "staging_mb")
        if timeout_s is not None:
            p.field_mask |= _lib.PARAM_TIMEOUT
            p.timeout_s = float(timeout_s)
        self.src, self.dst, self.comm = src, dst, comm  # the C baseline reads them
        self._h = None
        h = _lib.c_vp()
        _lib.check(_lib.lib.reshard_baseline_create_mpi(src._h, dst._h, None, ctypes.byref(p),
                                                        comm._handle(), ctypes.byref(h)))
        self._h = h.value

    def bytes_moved(self):
        """Payload bytes one execution moves between distinct ranks, over all ranks."""
        return int(_lib.lib.reshard_baseline_bytes_moved(self._h))

    def execute(self, src=None, dst=None):
        """One refit: this rank's source and destination tensors by parameter name (or
        a list by buffer id), as Plan.execute; every rank of the comm calls it. Returns
        this rank's byte counts (bytes_recv, bytes_sent_network: everything it sent,
        bytes_local). A binding problem (a missing, mistyped or misshapen tensor) raises
        here, naming it, before the call; the peers then fail with TIMEOUT after
        timeout_s (the baseline has no refusal message)."""
        comm = self.comm
        comm_open(comm)
        s_arr, n_src, s_views, problems = bind(self.src, comm.rank, src, "source", comm.device,
                                               False)
        d_arr, n_dst, d_views, d_problems = bind(self.dst, comm.rank, dst, "destination",
                                                 comm.device, True)
        problems += d_problems
        if problems:
            raise_problems(problems)
        # busy: the baseline runs on the comm it was made with
        return comm._execute(lambda _h, st: _lib.lib.reshard_baseline_execute(
            self._h, s_arr, n_src, d_arr, n_dst, st), (s_views, d_views))
