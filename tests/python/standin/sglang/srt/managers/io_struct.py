"""Stand-in of SGLang at 1am9trash/sglang@a17753e449fb4a33070de071942da9cff1e2010e (python/sglang/srt/managers/io_struct.py): the request bodies of the routes reshard's client posts.

Fields and defaults as declared there (BaseReq's rid fields left out):
UpdateWeightsFromTensorReqInput 1522-1541, PauseGenerationReqInput 1409-1436 (mode
"abort" | "retract" | "in_place", ValueError otherwise), ContinueGenerationReqInput
1439-1445, UpdateWeightVersionReqInput 1655-1659. The HTTP server builds these from
the JSON body (an unknown field is a 422 there; a TypeError here)."""

from dataclasses import dataclass
from typing import List, Optional, Union


@dataclass
class UpdateWeightsFromTensorReqInput:
    serialized_named_tensors: List[Union[str, bytes]]
    load_format: Optional[str] = None
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: Optional[str] = None
    disable_draft_model: Optional[bool] = None
    torch_empty_cache: bool = False


@dataclass
class PauseGenerationReqInput:
    mode: str = "abort"

    def __post_init__(self):
        allowed = ["abort", "retract", "in_place"]
        if self.mode not in allowed:
            raise ValueError(f"Invalid mode: {self.mode!r}. Expected one of {allowed}.")


@dataclass
class ContinueGenerationReqInput:
    torch_empty_cache: bool = True


@dataclass
class UpdateWeightVersionReqInput:
    new_version: str
    abort_all_requests: bool = True
