"""Find and load libreshard.so, declare the C functions the package calls.

The library is looked for, in order:
  1. the path in the RESHARD_LIBRARY environment variable;
  2. for an installed package (cmake --install), the library directory recorded
     in _install.py, relative to the package;
  3. for the source tree (PYTHONPATH=<repo>/python), its build directories:
     <repo>/build/libreshard.so, then <repo>/build*/libreshard.so;
  4. the dynamic linker's search path (libreshard.so).
Everything here is private: the public classes wrap it.
"""

import ctypes
import glob
import os

from .errors import ReshardError

MAX_DIMS = 8
ALL_RANKS = -1

c_i32 = ctypes.c_int32
c_i64 = ctypes.c_int64
c_u64 = ctypes.c_uint64
c_vp = ctypes.c_void_p
c_str = ctypes.c_char_p
P = ctypes.POINTER


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", c_str), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", c_i64 * MAX_DIMS), ("view_ndim", ctypes.c_int),
                ("view_shape", c_i64 * MAX_DIMS), ("numel", c_i64), ("bytes", c_u64)]


class Box(ctypes.Structure):
    _fields_ = [("ndim", ctypes.c_int), ("offset", c_i64 * MAX_DIMS),
                ("extent", c_i64 * MAX_DIMS)]


class Fragment(ctypes.Structure):
    _fields_ = [("tensor", c_i32), ("rank", c_i32), ("buffer", c_i32), ("box", Box),
                ("base", c_i64), ("stride", c_i64 * MAX_DIMS)]


class Placement(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("dim", ctypes.c_int), ("split_factor", ctypes.c_int)]


class Mesh(ctypes.Structure):
    _fields_ = [("ndim", ctypes.c_int), ("shape", c_i64 * MAX_DIMS), ("ranks", P(c_i32))]


class BufferInfo(ctypes.Structure):
    _fields_ = [("rank", c_i32), ("buffer", c_i32), ("name", c_str), ("dtype", ctypes.c_int),
                ("ndim", ctypes.c_int), ("shape", c_i64 * MAX_DIMS), ("numel", c_i64),
                ("bytes", c_u64)]


class PlanParams(ctypes.Structure):
    _fields_ = [("field_mask", c_u64), ("world_size", c_i32), ("my_rank", c_i32),
                ("staging_bytes", c_u64), ("domain_size", c_i32), ("timeout_s", ctypes.c_double),
                ("relay_bytes", c_u64), ("summary", c_i32), ("host", P(c_i32)),
                ("device", P(c_i32)), ("colocated", c_i32), ("delta", c_i32),
                ("delta_checksum", c_i32)]


PARAM_STAGING_BYTES = 1 << 0
PARAM_DOMAIN_SIZE = 1 << 1
PARAM_TIMEOUT = 1 << 2
PARAM_RELAY_BYTES = 1 << 3
PARAM_SUMMARY = 1 << 4
PARAM_PLACEMENT = 1 << 5
PARAM_COLOCATED = 1 << 6
PARAM_DELTA = 1 << 7
PARAM_DELTA_CHECKSUM = 1 << 8
DEVICE_CPU = -1  # RESHARD_DEVICE_CPU


class PlanStats(ctypes.Structure):
    _fields_ = [("bytes_total", c_u64), ("bytes_local", c_u64), ("bytes_network", c_u64),
                ("bytes_nvlink", c_u64), ("bytes_lower_bound", c_u64),
                ("max_nic_send_bytes", c_u64), ("max_nic_recv_bytes", c_u64),
                ("nic_send_bound_bytes", c_u64), ("nic_recv_bound_bytes", c_u64),
                ("transfers", c_i64), ("pieces", c_i64), ("max_relay_bytes", c_u64),
                ("bytes_same_device", c_u64), ("bytes_same_host", c_u64),
                ("bytes_cross_host", c_u64), ("bound_same_device_bytes", c_u64),
                ("bound_same_host_bytes", c_u64), ("bound_cross_host_bytes", c_u64),
                ("bytes_peer_read", c_u64)]


BUFFER_DTYPE = 1  # reshard_buffer_t.flags: dtype is given


class Buffer(ctypes.Structure):
    _fields_ = [("ptr", c_vp), ("bytes", c_u64), ("name", c_str), ("flags", ctypes.c_uint32),
                ("dtype", ctypes.c_int)]


class DeltaInfo(ctypes.Structure):
    _fields_ = [("version", c_i64), ("state", ctypes.c_int), ("snapshot_bytes", c_u64),
                ("relay_bytes", c_u64), ("stream_bytes", c_u64), ("wire_bytes", c_u64),
                ("changed_bytes", c_u64), ("chunks", c_i64 * 4), ("dense_streams", c_i64)]


class ExecStats(ctypes.Structure):
    _fields_ = [("bytes_sent_network", c_u64), ("bytes_sent_nvlink", c_u64),
                ("bytes_recv", c_u64), ("bytes_local", c_u64), ("bytes_peer_read", c_u64)]


class ModelOptions(ctypes.Structure):
    # reshard_model_options_t in full: the library reads every field (infer_quant
    # and pow2_scale stay 0, a bf16 inference side, unless set)
    _fields_ = [("mtp", ctypes.c_int), ("dtype", ctypes.c_int), ("layers", c_i32),
                ("infer_quant", ctypes.c_int), ("pow2_scale", ctypes.c_int)]


class TrainSpec(ctypes.Structure):
    _fields_ = [("tp", c_i32), ("pp", c_i32), ("dp", c_i32), ("cp", c_i32), ("ep", c_i32),
                ("etp", c_i32), ("vpp", c_i32), ("first", c_i32), ("last", c_i32),
                ("convention", c_i32),
                # FSDP2 (convention "fsdp"): the dp_shard size and the transformers
                # release (reshard_model.h reshard_train_spec_t.fsdp, .transformers)
                ("fsdp", c_i32), ("transformers", c_i32)]


class InferSpec(ctypes.Structure):
    _fields_ = [("tp", c_i32), ("dp", c_i32), ("ep", ctypes.c_int), ("engines", c_i32),
                ("vllm", c_i32), ("redundant", c_i32), ("eplb_map", P(c_i32)),
                ("eplb_map_len", c_i64), ("engine", c_i32), ("dp_attention", ctypes.c_int),
                ("ep_size", c_i32), ("dp_lm_head", ctypes.c_int), ("moe_dense_tp", c_i32),
                ("a2a", c_i32), ("shared_fusion_off", ctypes.c_int)]


class ModelBuffer(ctypes.Structure):
    _fields_ = [("rank", c_i32), ("buffer", c_i32), ("bytes", c_u64), ("name", c_str),
                ("module_buffer", ctypes.c_int)]


class ModelRefit(ctypes.Structure):
    _fields_ = [("tensors", c_vp), ("train", c_vp), ("infer", c_vp), ("train_buffers", c_vp),
                ("infer_buffers", c_vp), ("train_spec", TrainSpec), ("infer_spec", InferSpec),
                ("train_world", c_i32), ("infer_world", c_i32), ("infer_offset", c_i32)]


class Quant(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("scale_tensor", c_i32), ("pow2_scale", ctypes.c_int)]


st = ctypes.c_int  # reshard_status_t

TRANSPORT_VERSION = 1  # RESHARD_TRANSPORT_VERSION
AGREE_WORDS = 6  # RESHARD_AGREE_WORDS
INT64_MAX = 2**63 - 1


class TransportOps(ctypes.Structure):
    """reshard_transport_ops_t (reshard_transport.h); the optional members a Python
    transport leaves NULL are plain pointers here."""
    ALLOC = ctypes.CFUNCTYPE(st, c_vp, c_u64, P(c_vp))
    FREE = ctypes.CFUNCTYPE(None, c_vp, c_vp)
    SLOT = ctypes.CFUNCTYPE(st, c_vp, ctypes.c_int)
    POST = ctypes.CFUNCTYPE(st, c_vp, ctypes.c_int, c_i32, c_vp, c_u64)
    WAIT = ctypes.CFUNCTYPE(st, c_vp, ctypes.c_int, ctypes.c_double)
    FINISH = ctypes.CFUNCTYPE(st, c_vp, st, P(c_i64), P(c_i64), ctypes.c_double)
    _fields_ = [("version", ctypes.c_uint32), ("name", c_str), ("device_memory", ctypes.c_bool),
                ("alloc_staging", ALLOC), ("free_staging", FREE), ("round_begin", SLOT),
                ("post_send", POST), ("post_recv", POST), ("round_end", SLOT),
                ("round_wait", WAIT), ("pack", c_vp), ("unpack", c_vp), ("local_copy", c_vp),
                ("quantize", c_vp), ("finish", FINISH), ("unresponsive", c_vp),
                ("agree_exchange", c_vp), ("destroy", c_vp)]

# name: (restype, argtypes); a function missing from the library is left out
# of the handle (optional parts: MPI, NCCL).
_SIGNATURES = {
    "reshard_status_string": (c_str, [st]),
    "reshard_last_error": (c_str, []),
    "reshard_dtype_size": (ctypes.c_size_t, [ctypes.c_int]),
    "reshard_dtype_name": (c_str, [ctypes.c_int]),
    "reshard_tensors_create": (st, [P(c_vp)]),
    "reshard_tensors_destroy": (None, [c_vp]),
    "reshard_tensors_add": (st, [c_vp, c_str, ctypes.c_int, ctypes.c_int, P(c_i64), ctypes.c_int,
                                 P(c_i64), P(c_i32)]),
    "reshard_tensors_count": (c_i32, [c_vp]),
    "reshard_tensors_find": (c_i32, [c_vp, c_str]),
    "reshard_tensors_info": (st, [c_vp, c_i32, P(TensorInfo)]),
    "reshard_tensors_bytes": (c_u64, [c_vp]),
    "reshard_tensors_set_quant": (st, [c_vp, c_i32, P(Quant)]),
    "reshard_tensors_get_quant": (st, [c_vp, c_i32, P(Quant)]),
    "reshard_layout_create": (st, [c_vp, P(c_vp)]),
    "reshard_layout_destroy": (None, [c_vp]),
    "reshard_layout_add_fragment": (st, [c_vp, P(Fragment)]),
    "reshard_layout_add_dtensor": (st, [c_vp, c_i32, P(Mesh), P(Placement), c_i32, c_i64]),
    "reshard_layout_count": (c_i64, [c_vp]),
    "reshard_layout_fragment": (st, [c_vp, c_i64, P(Fragment)]),
    "reshard_layout_buffer_bytes": (c_u64, [c_vp, c_i32, c_i32]),
    "reshard_layout_buffer_count": (c_i32, [c_vp, c_i32]),
    "reshard_layout_declare_buffer": (st, [c_vp, c_i32, c_i32, c_str, ctypes.c_int, ctypes.c_int,
                                           P(c_i64)]),
    "reshard_layout_declared_count": (c_i64, [c_vp, c_i32]),
    "reshard_layout_buffer_info": (st, [c_vp, c_i32, c_i64, P(BufferInfo)]),
    "reshard_layout_find_buffer": (c_i32, [c_vp, c_i32, c_str]),
    "reshard_layout_zero_buffer": (st, [c_vp, c_i32, c_i32]),
    "reshard_layout_declared_buffer": (st, [c_vp, c_i32, c_i32, P(BufferInfo)]),
    "reshard_plan_create": (st, [c_vp, c_vp, P(PlanParams), P(c_vp)]),
    "reshard_plan_destroy": (None, [c_vp]),
    "reshard_plan_set_name": (st, [c_vp, ctypes.c_char_p]),
    "reshard_plan_get_stats": (st, [c_vp, P(PlanStats)]),
    "reshard_plan_pair_bytes": (c_u64, [c_vp, c_i32, c_i32]),
    "reshard_inproc_group_create": (st, [c_i32, P(c_vp)]),
    "reshard_inproc_group_destroy": (None, [c_vp]),
    "reshard_comm_create_inproc": (st, [c_vp, c_i32, P(c_vp)]),
    "reshard_comm_destroy": (None, [c_vp]),
    "reshard_comm_rank": (c_i32, [c_vp]),
    "reshard_comm_size": (c_i32, [c_vp]),
    "reshard_comm_create_transport": (st, [P(TransportOps), c_vp, c_i32, c_i32, P(c_vp)]),
    "reshard_comm_transport_name": (c_str, [c_vp]),
    "reshard_transport_error": (st, [st, c_str]),
    "reshard_plan_execute": (st, [c_vp, c_vp, P(Buffer), c_i32, P(Buffer), c_i32, P(ExecStats)]),
    "reshard_plan_fail": (st, [c_vp, st, ctypes.c_double]),
    "reshard_plan_fail_reason": (st, [c_vp, st, c_str, ctypes.c_double]),
    "reshard_comm_agree_values": (st, [c_vp, c_i32, P(c_str), P(c_str), ctypes.c_double]),
    "reshard_fill_pattern": (st, [c_vp, c_i32, P(Buffer), c_i32]),
    "reshard_verify_pattern": (st, [c_vp, c_i32, P(Buffer), c_i32, P(c_u64)]),
    "reshard_plan_delta_info": (st, [c_vp, c_i32, P(DeltaInfo)]),
    "reshard_plan_delta_adopt": (st, [c_vp, c_vp, c_i32]),
    "reshard_plan_delta_invalidate": (st, [c_vp, c_i32]),
    "reshard_delta_state_string": (c_str, [ctypes.c_int]),
    "reshard_model_load": (st, [c_str, P(ModelOptions), P(c_vp)]),
    "reshard_model_destroy": (None, [c_vp]),
    "reshard_train_spec_parse": (st, [c_str, P(TrainSpec)]),
    "reshard_infer_spec_parse": (st, [c_str, P(InferSpec)]),
    "reshard_train_world": (c_i32, [P(TrainSpec)]),
    "reshard_train_convention_name": (c_str, [ctypes.c_int]),
    "reshard_vllm_version_name": (c_str, [ctypes.c_int]),
    "reshard_infer_world": (c_i32, [P(InferSpec)]),
    "reshard_model_refit_create_at": (st, [c_vp, P(TrainSpec), P(InferSpec), c_i32,
                                           P(ModelRefit)]),
    "reshard_model_refit_create_scoped": (st, [c_vp, P(TrainSpec), P(InferSpec), c_i32, c_i32,
                                               c_i32, P(ModelRefit)]),
    "reshard_model_refit_destroy": (None, [P(ModelRefit)]),
    "reshard_model_buffers_count": (c_i64, [c_vp]),
    "reshard_model_buffers_get": (st, [c_vp, c_i64, P(ModelBuffer)]),
    # MPI part (RESHARD_HAVE_MPI): the MPI_Comm argument is declared when loaded
    "reshard_alloc_shared": (st, [c_u64, P(c_vp)]),
    "reshard_free_shared": (st, [c_vp]),
    "reshard_comm_create_mpi": (st, None),
    "reshard_mpi_placement": (st, None),
    "reshard_baseline_create_mpi": (st, [c_vp, c_vp, P(ctypes.c_int32), P(PlanParams), c_vp,
                                         P(c_vp)]),
    "reshard_baseline_execute": (st, [c_vp, P(Buffer), c_i32, P(Buffer), c_i32, P(ExecStats)]),
    "reshard_baseline_bytes_moved": (c_u64, [c_vp]),
    "reshard_baseline_destroy": (None, [c_vp]),
    # NCCL part (RESHARD_HAVE_NCCL)
    "reshard_nccl_device_count": (st, [P(ctypes.c_int)]),
    "reshard_nccl_unique_id_size": (ctypes.c_size_t, []),
    "reshard_nccl_get_unique_id": (st, [c_vp]),
    "reshard_comm_create_nccl_from_id": (st, [c_vp, c_i32, c_i32, ctypes.c_int, c_vp, P(c_vp)]),
    "reshard_comm_create_nccl": (st, [c_vp, c_vp, P(c_vp)]),
    "reshard_comm_create_cuda_ipc": (st, [c_vp, ctypes.c_int, c_vp, P(c_vp)]),
}


def _candidates():
    env = os.environ.get("RESHARD_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    try:
        from . import _install  # written by cmake --install
        libdir = os.path.normpath(os.path.join(here, _install.LIBDIR))
        found += [os.path.join(libdir, "libreshard.so")]
        found += sorted(glob.glob(os.path.join(libdir, "libreshard.so.*")))
    except ImportError:
        repo = os.path.dirname(os.path.dirname(here))
        builds = [os.path.join(repo, "build")] + sorted(glob.glob(os.path.join(repo, "build?*")))
        found += [os.path.join(b, "libreshard.so") for b in builds]
    return found + ["libreshard.so"]


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            # RTLD_GLOBAL: Open MPI's components resolve libmpi symbols globally.
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError("reshard: libreshard.so not found; set RESHARD_LIBRARY to its path. Tried: " +
                      "; ".join(tried))


lib, path = _load()
for _name, (_res, _args) in _SIGNATURES.items():
    _fn = getattr(lib, _name, None)
    if _fn is None:
        continue
    _fn.restype = _res
    if _args is not None:
        _fn.argtypes = _args


def has(name):
    """Whether the loaded library exports @p name (optional parts: MPI, NCCL)."""
    return hasattr(lib, name)


def last_error():
    """The calling thread's last C error message (the C side keeps one per thread)."""
    return lib.reshard_last_error().decode("utf-8", "replace")


def check(status, context=None):
    """Raise ReshardError for a non-zero status, with this thread's C message."""
    if status != 0:
        name = lib.reshard_status_string(status).decode()
        raise ReshardError(status, name, last_error(), context)


def shape_array(shape):
    arr = (c_i64 * MAX_DIMS)()
    for i, v in enumerate(shape):
        arr[i] = int(v)
    return arr


class Handle:
    """Base of the classes that own a C handle (Tensors, Layout, Plan, Model, Refit,
    Comm, InprocGroup): a copy or an unpickled object would be a second owner of the
    same handle and free it twice, so copy.copy, copy.deepcopy and pickle raise
    TypeError naming the class. A subclass naming its C destroy function in
    ``_destroy`` has its handle ``_h`` freed with it."""

    __slots__ = ()
    _destroy = ""

    def __del__(self):
        if self._destroy and getattr(self, "_h", None):
            getattr(lib, self._destroy)(self._h)
            self._h = None

    def _no_copy(self, what):
        raise TypeError("reshard.%s cannot be %s: it owns a C handle, which a second object "
                        "would free twice; build a new one (or share this one)"
                        % (type(self).__name__, what))

    def __copy__(self):
        self._no_copy("copied")

    def __deepcopy__(self, memo):
        self._no_copy("copied")

    def __reduce_ex__(self, protocol):
        self._no_copy("pickled")

    def __reduce__(self):
        self._no_copy("pickled")


I32_MIN, I32_MAX = -(2 ** 31), 2 ** 31 - 1


def as_int(value, what, lo=I32_MIN, hi=I32_MAX):
    """``value`` as a Python int in [lo, hi]: an int (numpy integers too), never a
    bool, str or float; TypeError / ValueError naming ``what`` otherwise."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("reshard: %s must be an int, got %r (%s)"
                        % (what, value, type(value).__name__))
    v = value.__index__()
    if not lo <= v <= hi:
        raise ValueError("reshard: %s = %d is outside [%d, %d]" % (what, v, lo, hi))
    return v


def as_mib_bytes(value, what):
    """A size in MiB (an int or a float, never a bool or str) as bytes for a uint64_t:
    TypeError / ValueError naming ``what`` for a negative, NaN or too large one."""
    if isinstance(value, (bool, str, bytes)) or not (hasattr(value, "__index__")
                                                     or hasattr(value, "__float__")):
        raise TypeError("reshard: %s must be a number of MiB, got %r (%s)"
                        % (what, value, type(value).__name__))
    v = value.__index__() if hasattr(value, "__index__") else float(value)
    if not 0 <= v < 2 ** 44:
        raise ValueError("reshard: %s = %r MiB is outside [0, 2**44) (its bytes must fit in "
                         "64 bits)" % (what, value))
    return v << 20 if isinstance(v, int) else int(v * (1 << 20))
