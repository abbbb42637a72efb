"""Communicators (reshard_comm_t): in-process threads (tests), MPI from an mpi4py
communicator (CPU memory), NCCL bootstrapped through a key-value store (GPU memory)."""

import atexit
import ctypes
import threading
import weakref

from . import _lib
from .errors import Status, error


class Comm(_lib.Handle):
    """One rank's transport endpoint. ``kind`` is "inproc", "mpi", "nccl" or "cuda-ipc"; ``device``
    the memory its buffers live in ("cpu" or "cuda"). Destroyed by close() or when
    garbage-collected (before MPI_Finalize for MPI ones: close() it)."""

    def __init__(self, handle, kind, device, keep=None):
        self._h = handle
        self.kind = kind
        self.device = device
        self._keep = keep  # the in-process group, the stream: outlive the endpoint
        self._calls = 0  # executions in flight (Plan.execute): close() waits for them
        self._idle = threading.Condition()

    @property
    def closed(self):
        return self._h is None

    def _handle(self):
        if self._h is None:
            raise error(Status.INVALID_ARG, "comm is closed (%s comm): make a new one" % self.kind)
        return self._h

    def _enter(self):
        """The handle for one call of the C library that uses the endpoint (Plan.execute);
        close() waits until _leave(). ReshardError (INVALID_ARG) once closed."""
        with self._idle:
            h = self._handle()
            self._calls += 1
            return h

    def _leave(self):
        with self._idle:
            self._calls -= 1
            self._idle.notify_all()

    def _execute(self, call, views):
        """One execution of the C library on this endpoint (Plan.execute,
        Baseline.execute): ``call(handle, stats)`` returns its status; ``views`` (the
        bound tensors), an argument of this call, stay referenced through it. Returns
        the ExecStats as a dict; ReshardError for a failed status."""
        st = _lib.ExecStats()
        h = self._enter()
        try:
            status = call(h, ctypes.byref(st))
        finally:
            self._leave()
        _lib.check(status)
        return {k: getattr(st, k) for k, _ in _lib.ExecStats._fields_}

    @property
    def rank(self):
        """This endpoint's rank; ReshardError (INVALID_ARG) once closed."""
        return _lib.lib.reshard_comm_rank(self._handle())

    @property
    def size(self):
        """The number of ranks; ReshardError (INVALID_ARG) once closed."""
        return _lib.lib.reshard_comm_size(self._handle())

    def close(self):
        """Free the endpoint (local; an MPI one frees its duplicate communicator, so
        before MPI_Finalize: after it, the endpoint is left to the process's end). While
        another thread executes on it, waits for that execution to return (bounded by
        the plan's timeout); an execution that starts later finds it closed."""
        idle = getattr(self, "_idle", None)
        if idle is None:  # __init__ did not finish
            return
        with idle:
            idle.wait_for(lambda: self._calls == 0)
            self._close()

    def _close(self):
        if self._h:
            if self.kind == "mpi" and _mpi_finalized():
                self._h = None
                return
            _lib.lib.reshard_comm_destroy(self._h)
            self._h = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        if self._h is None:
            return "Comm(kind=%r, closed)" % self.kind
        return "Comm(kind=%r, rank=%d, size=%d)" % (self.kind, self.rank, self.size)


def _mpi_finalized():
    from mpi4py import MPI
    return MPI.Is_finalized()


# --- in-process ----------------------------------------------------------------------------


class InprocGroup(_lib.Handle):
    """An in-process group of ``nranks`` threads (tests and examples): one comm per
    thread, comm(rank)."""

    def __init__(self, nranks):
        h = _lib.c_vp()
        _lib.check(_lib.lib.reshard_inproc_group_create(int(nranks), ctypes.byref(h)))
        self._h = h.value
        self.nranks = int(nranks)
        self._comms = []

    def comm(self, rank):
        h = _lib.c_vp()
        _lib.check(_lib.lib.reshard_comm_create_inproc(self._h, int(rank), ctypes.byref(h)))
        c = Comm(h.value, "inproc", "cpu", keep=self)
        self._comms.append(c)
        return c

    def close(self):
        for c in self._comms:
            c.close()
        self._comms = []
        if self._h:
            _lib.lib.reshard_inproc_group_destroy(self._h)
            self._h = None

    def __del__(self):
        self.close()


def run_threads(nranks, fn):
    """Run fn(comm) on ``nranks`` threads, thread r with rank r of a new in-process
    group; returns the results by rank; re-raises the first rank's exception (by
    rank) after every thread ended."""
    group = InprocGroup(nranks)
    results, errors = [None] * nranks, [None] * nranks
    comms = [group.comm(r) for r in range(nranks)]

    def body(r):
        try:
            results[r] = fn(comms[r])
        except BaseException as e:  # reported below, on the caller's thread
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,)) for r in range(nranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    group.close()
    for e in errors:
        if e is not None:
            raise e
    return results


# --- MPI -----------------------------------------------------------------------------------


_open_mpi_comms = weakref.WeakSet()


def _close_mpi_comms():
    """Registered after mpi4py's own exit handler, so it runs first: endpoints still
    open at exit are freed before MPI_Finalize."""
    for c in list(_open_mpi_comms):
        c.close()


def from_mpi(mpi_comm):
    """An MPI endpoint on a duplicate of an mpi4py communicator (collective over it,
    as reshard_comm_create_mpi). The library must be built with MPI (the same MPI
    mpi4py uses). Close it before MPI_Finalize; endpoints left open are closed at
    interpreter exit, before mpi4py finalizes MPI."""
    if not _lib.has("reshard_comm_create_mpi"):
        raise error(Status.UNSUPPORTED, "this libreshard was built without MPI")
    from mpi4py import MPI
    fn = _lib.lib.reshard_comm_create_mpi
    # MPI_Comm is passed by value: a pointer in Open MPI, an int in MPICH.
    handle_type = _lib.c_vp if MPI._sizeof(MPI.Comm) == ctypes.sizeof(_lib.c_vp) else ctypes.c_int
    fn.argtypes = [handle_type, ctypes.POINTER(_lib.c_vp)]
    h = _lib.c_vp()
    _lib.check(fn(handle_type(MPI._handleof(mpi_comm)), ctypes.byref(h)))
    c = Comm(h.value, "mpi", "cpu", keep=mpi_comm)
    if not _open_mpi_comms:
        # registered after mpi4py's handler, so it runs before it; unregistered
        # first so that it is registered once however often the set empties
        atexit.unregister(_close_mpi_comms)
        atexit.register(_close_mpi_comms)
    _open_mpi_comms.add(c)
    return c


# --- NCCL ----------------------------------------------------------------------------------


def nccl_available():
    """Whether this libreshard has the NCCL transport."""
    return _lib.has("reshard_comm_create_nccl_from_id")


def _need_nccl():
    if not nccl_available():
        raise error(Status.UNSUPPORTED,
                    "this libreshard was built without the NCCL transport (configure with "
                    "CUDA and NCCL, -DRESHARD_WITH_NCCL=ON)")


def nccl_unique_id():
    """A new NCCL unique id (bytes), made by reshard_nccl_get_unique_id."""
    _need_nccl()
    n = _lib.lib.reshard_nccl_unique_id_size()
    buf = ctypes.create_string_buffer(n)
    _lib.check(_lib.lib.reshard_nccl_get_unique_id(buf))
    return buf.raw


def exchange_unique_id(store, rank, key="reshard/nccl_unique_id", make_id=None):
    """Rank 0 makes an id (``make_id``, default nccl_unique_id) and store.set()s it
    under ``key``; every other rank store.get()s it (a torch.distributed.TCPStore
    waits until it is set, up to its timeout). Returns the id bytes on every rank."""
    if rank == 0:
        uid = (make_id or nccl_unique_id)()
        store.set(key, uid)
        return bytes(uid)
    uid = store.get(key)
    return uid.encode("latin-1") if isinstance(uid, str) else bytes(uid)


def from_nccl_store(store, rank, world, key="reshard/nccl_unique_id", device=None,
                    stream=None):
    """An NCCL endpoint for separately launched processes: the unique id travels
    through ``store`` (any object with set(key, bytes) and get(key) -> bytes, e.g.
    torch.distributed.TCPStore), then every rank joins (collective, bounded by
    RESHARD_NCCL_TIMEOUT_S). ``device``: CUDA device index or torch.device (default, and
    for ``torch.device("cuda")`` without an index: torch's current device); ``stream``: a
    torch.cuda.Stream or a raw cudaStream_t of that device (default torch's current
    stream on it, so reshard runs in the framework's stream order; the default stream,
    handle 0, is passed as cudaStreamLegacy). Errors: ReshardError RANK, TRANSPORT (a bad
    id from the store), INVALID_ARG (a stream of another device), and as
    reshard_comm_create_nccl_from_id."""
    _need_nccl()
    if not 0 <= rank < world:
        raise error(Status.RANK, "NCCL rank %d outside [0, %d)" % (rank, world))
    uid = exchange_unique_id(store, rank, key)
    size = _lib.lib.reshard_nccl_unique_id_size()
    if len(uid) != size:
        raise error(Status.TRANSPORT, "rank %d got a %d-byte NCCL id under %r from the store; "
                    "expected %d" % (rank, len(uid), key, size))
    device, raw_stream = _cuda_device_stream(device, stream)
    h = _lib.c_vp()
    _lib.check(_lib.lib.reshard_comm_create_nccl_from_id(uid, int(rank), int(world), device,
                                                          raw_stream, ctypes.byref(h)))
    return Comm(h.value, "nccl", "cuda", keep=stream)


def from_cuda_ipc(control, device=None, stream=None):
    """A colocated endpoint on GPU memory for processes of one host, several of which may
    share one GPU (reshard_comm_create_cuda_ipc; local): plans made with
    ``colocated=True`` move every piece between two ranks as a one-sided read of the
    owner's device allocation through CUDA IPC (torch tensors of PyTorch's caching
    allocator work: the offset from the allocation's base travels with the handle).
    ``control`` is a host-memory Comm of the same ranks (Comm.from_mpi, Comm.from_torch
    over a gloo group) that carries the buffer tables and the agreements; it is kept
    alive by this endpoint and must not be used while it executes. ``device`` and
    ``stream`` as in from_nccl_store. A plan with pieces between hosts is UNSUPPORTED on
    it. Raises ReshardError (UNSUPPORTED: built without CUDA or no device; INVALID_ARG:
    a GPU control comm)."""
    if not _lib.has("reshard_comm_create_cuda_ipc"):
        raise error(Status.UNSUPPORTED, "this libreshard was built without CUDA (the cuda-ipc "
                    "endpoint needs the NCCL build)")
    device, raw_stream = _cuda_device_stream(device, stream)
    h = _lib.c_vp()
    _lib.check(_lib.lib.reshard_comm_create_cuda_ipc(control._handle(), device, raw_stream,
                                                      ctypes.byref(h)))
    return Comm(h.value, "cuda-ipc", "cuda", keep=(control, stream))


def _raw_pointer(obj, what):
    """The address an NCCL communicator or CUDA stream object carries: an int, a ctypes
    pointer or c_void_p, or an object with ``.value`` (ctypes), ``.ptr`` (CuPy's
    NcclCommunicator) or ``.cuda_stream`` (torch.cuda.Stream)."""
    for attr in ("cuda_stream", "ptr"):
        if hasattr(obj, attr) and not isinstance(obj, int):
            obj = getattr(obj, attr)
    if isinstance(obj, ctypes.c_void_p):
        obj = obj.value
    elif isinstance(obj, ctypes._Pointer):
        obj = ctypes.cast(obj, ctypes.c_void_p).value
    if not isinstance(obj, int) or obj == 0:
        raise error(Status.INVALID_ARG, "Comm.from_nccl: %s must be a non-NULL address (an "
                    "int, a ctypes pointer, an object with .ptr), not %r" % (what, obj))
    return obj


def from_nccl(nccl_comm, stream=None):
    """An endpoint on an NCCL communicator the caller already has (reshard_comm_create_nccl;
    local, no communication): rank, size and device are the communicator's, and it stays
    the caller's (closing the endpoint does not destroy it) — but an error or timeout
    during an execution aborts it, after which it must not be used. For reshard's
    timeouts to hold it should be nonblocking (config.blocking = 0). Do not use it from
    another thread during an execution.

    ``nccl_comm`` is the ncclComm_t address: vLLM's PyNcclCommunicator(...).comm (a
    ctypes pointer), CuPy's cupy.cuda.nccl.NcclCommunicator(...).ptr, or an int from a
    C extension; torch 1.13 does not hand out the communicators of its NCCL process
    groups (use Comm.from_torch(group) for those). ``stream``: a torch.cuda.Stream or a
    raw cudaStream_t (default: torch's current stream on the communicator's device when
    torch has CUDA, else the endpoint's own stream). Raises ReshardError (UNSUPPORTED:
    built without NCCL or no CUDA device; INVALID_ARG; TRANSPORT)."""
    _need_nccl()
    addr = _raw_pointer(nccl_comm, "nccl_comm")
    if stream is None or isinstance(stream, int) or hasattr(stream, "cuda_stream"):
        _, raw_stream = _cuda_device_stream(None, stream)  # torch's default stream: legacy
    else:
        raw_stream = _raw_pointer(stream, "stream")
    h = _lib.c_vp()
    _lib.check(_lib.lib.reshard_comm_create_nccl(addr, raw_stream, ctypes.byref(h)))
    return Comm(h.value, "nccl", "cuda", keep=(nccl_comm, stream))


# cudaStreamLegacy: the legacy default stream as a handle the C side can tell from NULL
# (NULL there means "make a stream of your own", with no order against the framework's).
CUDA_STREAM_LEGACY = 0x1


def _cuda_device_stream(device, stream):
    """(device index, raw cudaStream_t or None) for reshard_comm_create_nccl_from_id.
    A device without an index (``torch.device("cuda")``, None) is torch's current device,
    so that the stream (torch's current stream on that device by default) and the
    endpoint's device agree. A stream handle 0 (what ``cuda_stream`` is for PyTorch's
    default stream) becomes cudaStreamLegacy: the endpoint then runs in the default
    stream's order, instead of on a stream of its own that the default stream's pending
    writes do not order. A stream of another device is refused."""
    try:
        import torch
        have_cuda = torch.cuda.is_available()
    except ImportError:
        torch, have_cuda = None, False
    if device is not None and hasattr(device, "index"):  # a torch.device
        device = device.index
    if device is None:
        device = torch.cuda.current_device() if have_cuda else -1
    device = int(device)
    if stream is None and have_cuda:
        stream = torch.cuda.current_stream(device if device >= 0 else None)
    stream_device = getattr(getattr(stream, "device", None), "index", None)
    if stream_device is not None and device >= 0 and int(stream_device) != device:
        raise error(Status.INVALID_ARG, "NCCL endpoint on CUDA device %d with a stream of "
                    "device %d: pass a stream of the endpoint's device" % (device, stream_device))
    if stream is not None and hasattr(stream, "cuda_stream"):
        stream = stream.cuda_stream
    if stream is None:
        return device, None
    raw = int(stream)
    return device, (raw if raw != 0 else CUDA_STREAM_LEGACY)
