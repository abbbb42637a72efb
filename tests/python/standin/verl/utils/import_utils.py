"""Revision followed: dongha-yoon/verl d6f2c522 (checked against verl-project/verl 1dda039b).
verl.utils.import_utils.import_external_libs (stand-in): import each named module,
so that a third-party checkpoint engine registers itself on import."""

import importlib


def import_external_libs(external_libs=None):
    if external_libs is None:
        return
    if not isinstance(external_libs, list):
        external_libs = [external_libs]
    for lib in external_libs:
        importlib.import_module(lib)
