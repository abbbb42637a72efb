#!/usr/bin/python3
"""Write docs/conventions.md and its pages per model group (docs/conventions-*.md) from the
library: for every shipped model (data/models/*),
what a Megatron training rank and a vLLM inference rank hold under an example spec —
parameter names (layer index and local expert number generalized), shapes per rank,
dtypes, which HF tensor boxes each parameter holds in buffer order (the fused order),
padding rows and tied weights. Everything is read from Model.refit's layouts, so the page
cannot drift from what reshard plans; tests/python/test_conventions_doc.py regenerates them
and fails when a page differs.

    RESHARD_LIBRARY=build/libreshard.so PYTHONPATH=python /usr/bin/python3 tools/conventions.py
    ... tools/conventions.py --check   # exit 1 when a docs/conventions*.md is not current
"""

import argparse
import glob
import json
import os
import re
import sys
from typing import Dict, List

import numpy as np

import reshard
from reshard.hf import hf_boxes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
TRAIN, INFER = "tp=2", "tp=2"  # the example specs every family is shown under
LAYER = re.compile(r"\.layers\.\d+\.")
EXPERT_NO = re.compile(r"(\.weight|\.bias)\d+$")


def general(name: str) -> str:
    """A name with its layer index (and Megatron's local expert number) generalized."""
    return EXPERT_NO.sub(r"\1<K>", LAYER.sub(".layers.<N>.", name))


def short(name: str) -> str:
    """An HF name inside a layer, without the layer prefix."""
    return re.sub(r"^.*\.layers\.\d+\.", "", name)


def box_text(off, ext, shape) -> str:
    dims = [":" if o == 0 and e == s else "%d:%d" % (o, o + e) for o, e, s in zip(off, ext, shape)]
    return "[%s]" % ", ".join(dims)


def interleave(f) -> str:
    """How a fragment alternates with the others in its parameter (the innermost
    dimension whose stride is not the contiguous one), or "" when it is contiguous."""
    want = [1] * len(f.extent)
    for d in range(len(f.extent) - 2, -1, -1):
        want[d] = want[d + 1] * f.extent[d + 1]
    odd = [d for d in range(len(f.extent)) if f.extent[d] > 1 and f.strides[d] != want[d]]
    if not odd:
        return ""
    d, lead = odd[-1], next(d for d in range(len(f.extent)) if f.extent[d] > 1)
    if d == lead:
        return " (in %d blocks along dim %d, alternating with the others)" % (f.extent[d], d)
    return " (at a step of %d along dim %d, alternating with the others)" % (
        f.strides[d] // want[d], d)


def pieces(refit, frags, p) -> List[str]:
    """What parameter ``p`` holds, in buffer order: each fragment as HF boxes, an
    interleaved one marked with how many blocks it is cut into, then the rows no
    fragment reaches (padding), or "zero-filled" for a parameter no fragment reaches."""
    out = []
    row = int(np.prod(p.shape[1:], dtype=np.int64)) if len(p.shape) > 1 else 1
    reached = []  # [first row, last row + 1) of each fragment's elements
    for f in sorted(frags, key=lambda f: f.base):
        info = refit.tensors.info(f.tensor)
        boxes = [box_text(o, e, info.shape) for o, e, _ in
                 hf_boxes(info.shape, info.view_shape or info.shape, f.offset, f.extent, None)]
        text = "`%s%s`" % (short(info.name), boxes[0] if len(boxes) == 1 else
                           " in %d boxes, %s..." % (len(boxes), boxes[0]))
        out.append(text + interleave(f))
        last = f.base + sum((e - 1) * s for e, s in zip(f.extent, f.strides))
        reached.append((f.base // row, last // row + 1))
    if not frags:
        return ["nothing: zero-filled"]
    gaps, at = [], 0
    for a, b in sorted(reached) + [(p.shape[0], p.shape[0])]:
        if a > at:
            gaps.append("%d:%d" % (at, a))
        at = max(at, b)
    if gaps:
        out.append("rows %s padding" % ", ".join(gaps))
    return out


def side_table(refit, side: str, layout) -> List[str]:
    ranks = list(range(refit.train_world)) if side == "train" else \
        list(range(refit.infer_offset, refit.world))
    frags: Dict[int, Dict[int, list]] = {r: {} for r in ranks}
    for f in layout.fragments():
        if f.rank in frags:
            frags[f.rank].setdefault(f.buffer, []).append(f)
    rows: Dict[str, dict] = {}
    for r in ranks:
        buffers = set(refit.module_buffers(r)) if side == "train" else set()
        for p in layout.parameters(r):
            g = general(p.name) + ("|(a module buffer)" if p.name in buffers else "")
            row = rows.setdefault(g, {"count": {}, "shapes": {}, "dtype": p.dtype.name,
                                      "holds": None, "others": []})
            row["count"][r] = row["count"].get(r, 0) + 1
            row["shapes"].setdefault(r, set()).add(tuple(p.shape))
            if row["holds"] is None:
                row["holds"] = pieces(refit, frags[r].get(p.buffer, []), p)
            elif row["count"][r] == 1:
                tail = pieces(refit, frags[r].get(p.buffer, []), p)[-1]
                if tail.startswith(("rows", "nothing")):
                    row["others"].append("rank %d: %s" % (r - ranks[0], tail))
    out = ["| parameter | shape per rank | dtype | holds, in buffer order (rank 0) |",
           "|---|---|---|---|"]
    for g, row in rows.items():
        shapes = {r: " or ".join(str(list(s)) for s in sorted(v)) for r, v in
                  row["shapes"].items()}
        if len(set(shapes.values())) == 1 and len(shapes) == len(ranks):
            shape = shapes[ranks[0]]
        else:
            shape = "; ".join("rank %d: %s" % (r - ranks[0], s) for r, s in shapes.items())
        name, _, note = g.partition("|")
        out.append("| `%s`%s | %s | %s | %s |" % (name, " " + note if note else "", shape,
                                                 row["dtype"],
                                                 "; ".join(row["holds"] + row["others"])))
    return out


def family_section(path: str) -> List[str]:
    name = os.path.basename(path)[:-len(".json")]
    with open(path) as f:
        cfg = json.load(f)
    refit = reshard.Model(name).refit(TRAIN, INFER)
    tied = bool(cfg.get("tie_word_embeddings", False))
    out = ["## %s" % name, "",
           "`model_type` %s, %d logical tensors, vocabulary %s, embeddings %s. Megatron "
           "%s (%s) on ranks 0..%d, vLLM %s %s on ranks %d..%d; rank numbers below count "
           "from each side's first rank." % (
               cfg.get("model_type"), len(refit.tensors), cfg.get("vocab_size"),
               "tied (one HF tensor, `model.embed_tokens.weight`, serves both ends)" if tied
               else "untied", TRAIN, refit.convention, refit.train_world - 1, INFER,
               "(names of vLLM %s)" % refit.vllm, refit.infer_offset, refit.world - 1), ""]
    for side, layout, what in (("train", refit.train, "Megatron-Core `named_parameters()`"),
                               ("infer", refit.infer, "vLLM `named_parameters()`")):
        out += ["%s:" % what, ""] + side_table(refit, side, layout) + [""]
    return out


# The pages the models are grouped on, by model_type: (file, title, model types); a type
# not named here goes on the last page.
GROUPS = [
    ("conventions-dense.md", "dense models (Llama, Qwen2.5, Qwen3)",
     ("llama", "mistral", "qwen2", "qwen3")),
    ("conventions-moe.md", "MoE models (Mixtral, Qwen2-MoE, Qwen3-MoE)",
     ("mixtral", "qwen2_moe", "qwen3_moe")),
    ("conventions-deepseek.md", "DeepSeek, Kimi and GLM-4.5",
     ("deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe")),
    ("conventions-gpt-oss.md", "gpt-oss", ("gpt_oss",)),
    ("conventions-hybrid.md", "hybrid models (Nemotron-H, Qwen3-Next) and others",
     ("nemotron_h", "qwen3_next")),
]

GENERATED = ("Generated by `tools/conventions.py` from the library's own layouts "
             "(`Model(name).refit(\"%s\", \"%s\")`); do not edit by hand: "
             "`tests/python/test_conventions_doc.py` fails when the pages differ from what "
             "the library plans." % (TRAIN, INFER))


def group_of(model_type: str) -> int:
    for i, (_, _, types) in enumerate(GROUPS):
        if model_type in types:
            return i
    return len(GROUPS) - 1


def render() -> Dict[str, str]:
    """{file name under docs/: its text} for conventions.md and every group page."""
    models = [[] for _ in GROUPS]
    for path in sorted(glob.glob(os.path.join(ROOT, "data", "models", "*.json"))):
        with open(path) as f:
            model_type = json.load(f).get("model_type")
        models[group_of(model_type)].append((path, model_type))
    index = ["# What each side holds, per shipped model", "",
             "[Python package](python.md) · [families](families.md)", "",
             "What vLLM tensor-parallel rank 0 of a qwen3-0.6b refit holds: names, shapes "
             "per rank and dtypes, from the library's own layout:", "",
             "<!-- docs: run -->",
             "```python",
             "import reshard",
             "",
             "refit = reshard.Model(\"qwen3-0.6b\", layers=1).refit(\"tp=2\", \"tp=2\")",
             "for p in refit.infer.parameters(refit.infer_offset):  # ranks 2-3 are vLLM's",
             "    print(p.name, list(p.shape), p.dtype.name)",
             "```", "",
             GENERATED + " `reshard.shards_from_hf(refit, side, rank, hf)` builds exactly "
             "these parameters from HF tensors ([python.md](python.md)).", "",
             "| model | `model_type` | page |", "|---|---|---|"]
    for (page, title, _), entries in zip(GROUPS, models):
        for path, model_type in entries:
            name = os.path.basename(path)[:-len(".json")]
            index.append("| %s | `%s` | [%s](%s#%s) |" % (
                name, model_type, title, page, re.sub(r"[^a-z0-9_-]", "", name.lower())))
    index += ["", "## How to read a table", "",
              "One row per parameter name, `layers.<N>` for every decoder "
              "layer (N counted from 0 on each pipeline stage in Megatron) and `weight<K>` for "
              "Megatron's local expert K. *holds* lists, for the first such parameter of the "
              "side's first rank, the HF tensor boxes (names inside the layer, `[rows, cols]` "
              "in the HF shape, `:` a whole dimension; routed experts stacked as "
              "`experts.gate_proj.weight[E, ...]`, expert e = HF `experts.e.gate_proj.weight`) "
              "in the order they lie in the parameter: that is the fused order (`A; B` = A's "
              "rows, then B's). A box *in n blocks along dim d* is cut there and its blocks "
              "alternate with the other boxes' (vLLM's `w13_weight`: per expert, [gate; up]); "
              "*at a step of k along dim d*: its rows take every k-th row there (gpt-oss: gate "
              "and up rows alternate). *padding* rows belong to no HF row: vLLM holds zeros "
              "there, Megatron-LM (its HF converter) copies of the last vocabulary row, and "
              "Megatron-Bridge does not pad. *zero-filled*: a parameter the engine holds at "
              "zero on that rank. Names ending `_bf16` / `_minus_1` are staged values the "
              "worker converts after the refit ([families](families.md))."]
    pages = {"conventions.md": "\n".join(index).rstrip() + "\n"}
    for (page, title, _), entries in zip(GROUPS, models):
        out = ["# What each side holds: %s" % title, "",
               "[All models, and how to read a table](conventions.md) · "
               "[Python package](python.md) · [families](families.md)", "", GENERATED, ""]
        for path, _ in entries:
            out += family_section(path)
        pages[page] = "\n".join(out).rstrip() + "\n"
    return pages


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare, do not write")
    ap.add_argument("--out", default=DOCS,
                    help="the folder to write conventions*.md into (default docs/)")
    args = ap.parse_args()
    pages = render()
    if args.check:
        stale = sorted(set(os.path.basename(p) for p in
                           glob.glob(os.path.join(args.out, "conventions*.md"))) ^ set(pages))
        differ = [n for n in sorted(pages) if n not in stale and
                  open(os.path.join(args.out, n)).read() != pages[n]]
        for n in stale + differ:
            print("%s is not current: run tools/conventions.py" % os.path.join(args.out, n),
                  file=sys.stderr)
        return 1 if stale or differ else 0
    for n, text in pages.items():
        with open(os.path.join(args.out, n), "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
