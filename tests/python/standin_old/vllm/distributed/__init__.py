"""Stand-in: vllm.distributed (weight_transfer only)."""
