"""Stand-in of SGLang at 1am9trash/sglang@a17753e449fb4a33070de071942da9cff1e2010e (python/sglang/srt/distributed/parallel_state.py, re-exported by distributed/__init__.py): a worker's TP and PP place.

get_tensor_model_parallel_world_size 2266, get_tensor_model_parallel_rank 2271,
get_pipeline_model_parallel_world_size 2298: the sizes of the groups
initialize_model_parallel made in this process. Here _set_place stands for that
initialization (the stand-in's ModelRunner calls it)."""

_place = {"tp_rank": None, "tp_size": None, "pp_size": 1}


def _set_place(tp_rank, tp_size, pp_size=1):
    _place.update(tp_rank=tp_rank, tp_size=tp_size, pp_size=pp_size)


def _get(key):
    if _place[key] is None:
        raise AssertionError("tensor model parallel group is not initialized")
    return _place[key]


def get_tensor_model_parallel_world_size():
    return _get("tp_size")


def get_tensor_model_parallel_rank():
    return _get("tp_rank")


def get_pipeline_model_parallel_world_size():
    return _place["pp_size"]
