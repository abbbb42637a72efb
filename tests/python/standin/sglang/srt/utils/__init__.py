"""Stand-in of SGLang at 1am9trash/sglang@a17753e449fb4a33070de071942da9cff1e2010e (python/sglang/srt/utils/common.py): dynamic_import and MultiprocessingSerializer.

dynamic_import (3336-3347): "pkg.mod.func" -> the function, ValueError for a path
without a dot. MultiprocessingSerializer: serialize(obj, output_str=False) pickles
with torch's ForkingPickler (output_str: base64 text, what the HTTP route carries),
deserialize(data) the reverse (text is base64-decoded first). Here: pickle of
CPU tensors (no CUDA IPC handles)."""

import base64
import importlib
import io
import pickle


def dynamic_import(func_path):
    parts = func_path.split(".")
    if len(parts) < 2:
        raise ValueError("func_path should contain both module name and func name "
                         "(such as 'module.func')")
    module = importlib.import_module(".".join(parts[:-1]))
    return getattr(module, parts[-1])


class MultiprocessingSerializer:
    @staticmethod
    def serialize(obj, output_str=False):
        buf = io.BytesIO()
        pickle.dump(obj, buf)
        data = buf.getvalue()
        return base64.b64encode(data).decode("utf-8") if output_str else data

    @staticmethod
    def deserialize(data):
        if isinstance(data, str):
            data = base64.b64decode(data)
        return pickle.loads(data)
