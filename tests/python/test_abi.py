"""The ctypes mirrors of the C structs (python/reshard/_lib.py) have the fields of
the public headers, in order: a struct that grows in C fails here, not in a refit."""

import os
import re

import pytest

from reshard import _lib

INCLUDE = os.path.join(os.path.dirname(__file__), "..", "..", "include", "reshard")

MIRRORS = {
    "reshard_tensor_info_t": _lib.TensorInfo, "reshard_box_t": _lib.Box,
    "reshard_fragment_t": _lib.Fragment, "reshard_placement_t": _lib.Placement,
    "reshard_mesh_t": _lib.Mesh, "reshard_buffer_info_t": _lib.BufferInfo,
    "reshard_plan_params_t": _lib.PlanParams, "reshard_plan_stats_t": _lib.PlanStats,
    "reshard_buffer_t": _lib.Buffer, "reshard_exec_stats_t": _lib.ExecStats,
    "reshard_model_options_t": _lib.ModelOptions, "reshard_train_spec_t": _lib.TrainSpec,
    "reshard_infer_spec_t": _lib.InferSpec, "reshard_model_buffer_t": _lib.ModelBuffer,
    "reshard_model_refit_t": _lib.ModelRefit, "reshard_transport_ops_t": _lib.TransportOps,
    "reshard_delta_info_t": _lib.DeltaInfo,
}


def header_structs():
    text = ""
    for f in sorted(os.listdir(INCLUDE)):
        if f.endswith(".h"):
            with open(os.path.join(INCLUDE, f)) as fh:
                text += fh.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    out = {}
    for body, name in re.findall(r"typedef struct\s*\w*\s*\{(.*?)\}\s*(\w+)\s*;", text,
                                 flags=re.S):
        fields = []
        for decl in body.split(";"):
            decl = decl.strip()
            if not decl:
                continue
            member = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", decl)  # a function pointer
            if member:
                fields.append(member.group(1))
                continue
            first, *rest = decl.split(",")
            names = [first.split()[-1]] + [r.strip() for r in rest]
            fields += [re.sub(r"[\*\s]|\[.*?\]", "", n) for n in names]
        out[name] = fields
    return out


@pytest.mark.parametrize("c_name", sorted(MIRRORS))
def test_struct_fields_match_the_header(c_name):
    structs = header_structs()
    assert c_name in structs, "%s is not in include/reshard" % c_name
    assert [f for f, _ in MIRRORS[c_name]._fields_] == structs[c_name]


def test_transport_constants_match_the_header():
    with open(os.path.join(INCLUDE, "reshard_transport.h")) as fh:
        text = fh.read()
    for macro, value in (("RESHARD_TRANSPORT_VERSION", _lib.TRANSPORT_VERSION),
                         ("RESHARD_AGREE_WORDS", _lib.AGREE_WORDS)):
        assert int(re.search(r"#define %s (\d+)" % macro, text).group(1)) == value, macro
