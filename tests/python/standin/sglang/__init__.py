"""Stand-in of SGLang at 1am9trash/sglang@a17753e449fb4a33070de071942da9cff1e2010e (python/sglang/__init__.py): the parts reshard's SGLang shell touches, nothing more.

That commit is sgl-project/sglang main of 2026-06-22 ("Fix EAGLE draft graph
seq_lens_sum padding (#26880)"), the revision docs/sglang-layouts.md follows. Each
file names the upstream file it follows on its first line; facts carry over, code
does not. _server.py (not an upstream file) is the process boundary: SGLang's HTTP
routes and its scheduler's dispatch to the TP workers, over a torch.distributed store
between separately started processes."""

REVISION = ("1am9trash/sglang", "a17753e449fb4a33070de071942da9cff1e2010e")
