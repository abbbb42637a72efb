"""Stand-in: vllm.distributed.weight_transfer (base, factory)."""
