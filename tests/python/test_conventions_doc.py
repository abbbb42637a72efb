"""docs/conventions.md and its pages per model group (docs/conventions-*.md) are what
tools/conventions.py writes from the library now: a change to a layout that does not
regenerate the pages fails here, and so does a page it no longer writes."""

import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_conventions_pages_are_current(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "conventions.py"), "--out",
                    str(tmp_path)], check=True, env=env, timeout=300)
    want = {os.path.basename(p) for p in glob.glob(str(tmp_path / "conventions*.md"))}
    have = {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "docs", "conventions*.md"))}
    assert "conventions.md" in want and len(want) > 1, want
    assert have == want, "docs/ has %s, tools/conventions.py writes %s: run it" % (
        sorted(have), sorted(want))
    for name in sorted(want):
        with open(os.path.join(ROOT, "docs", name)) as f:
            page = f.read()
        assert page == (tmp_path / name).read_text(), \
            "docs/%s differs from what the library plans: run tools/conventions.py" % name


def test_python_page_links_the_conventions_on_its_first_screen():
    with open(os.path.join(ROOT, "docs", "python.md")) as f:
        first_screen = "".join(f.readlines()[:12])
    assert "(conventions.md)" in first_screen
