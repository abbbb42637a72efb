"""Stand-in of vllm/v1/worker/gpu_worker.py at new-TonyWang/vllm@142e770e, only its
sleep mode as a weight-transfer engine meets it: the Worker holds the engine as
``weight_transfer_engine``; sleep(level) frees the weights (level 2 keeps no copy:
they come back in new memory at the same addresses, contents not kept, buffers
restored from a CPU copy); wake_up(tags) maps them back. Neither tells the engine.
Here, on CPU, level 2 "frees" by overwriting every parameter with ``discard_byte``
(what a reallocated block holds is arbitrary)."""

from __future__ import annotations

from typing import Any, List, Optional


class Worker:
    discard_byte = 0xA5

    def __init__(self, model: Any, weight_transfer_engine: Any) -> None:
        self.model = model
        self.weight_transfer_engine = weight_transfer_engine
        self._sleep_saved_buffers: dict = {}

    def sleep(self, level: int = 1) -> None:
        import torch
        if level == 2:
            self._sleep_saved_buffers = {n: b.clone() for n, b in self.model.named_buffers()}
            with torch.no_grad():
                for p in self.model.parameters():
                    p.data.view(torch.uint8).fill_(self.discard_byte)

    def wake_up(self, tags: Optional[List[str]] = None) -> None:
        if tags is None or "weights" in tags:
            for n, b in self.model.named_buffers():
                if n in self._sleep_saved_buffers:
                    b.data.copy_(self._sleep_saved_buffers[n])
            self._sleep_saved_buffers = {}
