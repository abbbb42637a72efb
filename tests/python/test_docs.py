"""The documentation's code blocks are kept true: every fenced block of README.md and
docs/*.md in sh, bash or python carries a marker on the line before its fence, and
the marker says what CI does with it:

    <!-- docs: run -->            run it from the repository root (sh: bash -e; python:
    <!-- docs: run 120 -->        /usr/bin/python3 over the release build), bounded by
                                  60 s or the given seconds; a non-zero exit fails
    <!-- docs: syntax, REASON --> parse it only (bash -n; Python's compile), REASON
                                  saying why it cannot run here: "needs a GPU",
                                  "needs vLLM", "a fragment of the user's program",
                                  "takes minutes", ...

Blocks in other languages (c, output, file trees) are not checked. A sh/python block
without a marker fails, so a new page cannot add unchecked code. Run blocks get the
environment CI runs with (Open MPI as root, PYTHONPATH=python, RESHARD_LIBRARY of the
build named by RESHARD_DOCS_BUILD, default build)."""

import ast
import glob
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MARK = re.compile(r"^<!-- docs: (run(?: (\d+))?|syntax, [^>]+?) -->$")
CHECKED = {"sh", "bash", "python"}


def blocks():
    """(page, line, language, marker or None, code) of every fenced block."""
    out = []
    for page in ["README.md"] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        path = os.path.join(ROOT, page)
        with open(path) as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            m = re.match(r"^```(\w*)\s*$", lines[i])
            if not m:
                i += 1
                continue
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            prev = lines[i - 1].strip() if i else ""
            out.append((os.path.relpath(path, ROOT), i + 1, m.group(1), MARK.match(prev),
                        "\n".join(lines[i + 1:j])))
            i = j + 1
    return out


CASES = [b for b in blocks() if b[2] in CHECKED]


def _id(b):
    return "%s:%d" % (b[0], b[1])


def test_the_pages_have_blocks_to_check():
    assert len(CASES) >= 10, [_id(b) for b in CASES]


@pytest.mark.parametrize("block", CASES, ids=_id)
def test_block(block):
    page, line, lang, mark, code = block
    assert mark is not None, (
        "%s:%d: a ```%s block without a marker on the line before it: add "
        "'<!-- docs: run -->' (CI runs it) or '<!-- docs: syntax, why it cannot run -->'"
        % (page, line, lang))
    if lang == "python":
        try:
            ast.parse(code)
        except SyntaxError as e:
            pytest.fail("%s:%d: the Python block does not parse: %s" % (page, line, e))
    else:
        p = subprocess.run(["bash", "-n"], input=code, text=True, capture_output=True)
        assert p.returncode == 0, "%s:%d: the shell block does not parse: %s" % (
            page, line, p.stderr)
    if not mark.group(1).startswith("run"):
        return
    bound = int(mark.group(2) or 60)
    build = os.environ.get("RESHARD_DOCS_BUILD", "build")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"),
               RESHARD_LIBRARY=os.path.join(ROOT, build, "libreshard.so"),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mpi_yield_when_idle="1")
    cmd = ["/usr/bin/python3", "-c", code] if lang == "python" else \
        ["bash", "-e", "-o", "pipefail", "-c", code]
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, text=True, capture_output=True,
                           timeout=bound)
    except subprocess.TimeoutExpired:
        pytest.fail("%s:%d: the block ran past its bound of %d s" % (page, line, bound))
    assert p.returncode == 0, "%s:%d: exit %d\n%s\n%s" % (page, line, p.returncode,
                                                         p.stdout[-3000:], p.stderr[-3000:])
