"""pytest setup: the package from this source tree (python/), the example's
framework conventions (examples/python/) importable."""

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _p in (os.path.join(_ROOT, "python"), os.path.join(_ROOT, "examples", "python"),
           os.path.dirname(os.path.abspath(__file__))):
    if _p not in sys.path:
        sys.path.insert(0, _p)
