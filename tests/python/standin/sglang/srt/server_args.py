"""Stand-in of SGLang at 1am9trash/sglang@a17753e449fb4a33070de071942da9cff1e2010e (python/sglang/srt/server_args.py): the server flags reshard's shell reads, their defaults, and the process-global server args.

Fields and defaults as declared there: tp_size 849-855 (1), pp_size 856-862 (1),
dp_size 868-874 (1), enable_dp_attention 918-921 (False), enable_dp_lm_head 926-929
(False), weight_version 1151-1154 ("default"), enable_lora 1258-1261 (None),
ep_size 1594-1600 (1), moe_a2a_backend 1601-1616 ("none"), moe_runner_backend
1617-1623 ("auto"), ep_num_redundant_experts 1636-1639 (0), enable_eplb 1645
(False), moe_dense_tp_size 1675-1678 (None), disable_shared_experts_fusion
1705-1708 (False), custom_weight_loader 2308-2314 (None, made [] in
__post_init__ 5636-5637). The global: set_global_server_args_for_scheduler 7188,
get_global_server_args 7196 (ValueError before it is set)."""

from dataclasses import dataclass
from typing import List, Optional


@dataclass
class ServerArgs:
    model_path: str = ""
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False
    enable_dp_lm_head: bool = False
    weight_version: str = "default"
    enable_lora: Optional[bool] = None
    ep_size: int = 1
    moe_a2a_backend: str = "none"
    moe_runner_backend: str = "auto"
    ep_num_redundant_experts: int = 0
    enable_eplb: bool = False
    moe_dense_tp_size: Optional[int] = None
    disable_shared_experts_fusion: bool = False
    custom_weight_loader: Optional[List[str]] = None

    def __post_init__(self):
        if self.custom_weight_loader is None:
            self.custom_weight_loader = []


_global_server_args = None


def set_global_server_args_for_scheduler(server_args):
    global _global_server_args
    _global_server_args = server_args


def get_global_server_args():
    if _global_server_args is None:
        raise ValueError("Global server args is not set yet!")
    return _global_server_args
