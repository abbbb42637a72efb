"""docs/conventions.md is what tools/conventions.py writes from the library now: a
change to a layout that does not regenerate the page fails here."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_conventions_page_is_current(tmp_path):
    out = tmp_path / "conventions.md"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "conventions.py"), "--out",
                    str(out)], check=True, env=env, timeout=300)
    with open(os.path.join(ROOT, "docs", "conventions.md")) as f:
        page = f.read()
    assert page == out.read_text(), \
        "docs/conventions.md differs from what the library plans: run tools/conventions.py"


def test_python_page_links_the_conventions_on_its_first_screen():
    with open(os.path.join(ROOT, "docs", "python.md")) as f:
        first_screen = "".join(f.readlines()[:12])
    assert "(conventions.md)" in first_screen
