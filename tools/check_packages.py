#!/usr/bin/python3
"""The package guard: every command a script or CMake test calls and every module
a Python file imports must come from a package in tools/packages.txt (or one that
every Debian system has: Essential or Priority required).

It reads the repository's shell scripts (*.sh, .ci/run), the COMMAND words of
every add_test in its CMakeLists.txt files, and the imports of every *.py file
outside build directories. A command is looked up on PATH, a module with
/usr/bin/python3's importlib, and the file found is traced to its Debian package
with `dpkg -S`. Anything not installed, not from a Debian package, or from a
package the list lacks is reported with the file and line that needs it, and the
exit status is 1; when a package of the list is not installed the guard cannot
tell and exits 77 (ctest's skip). Run it after `tools/apt-install.sh --all` (as .ci/run does):
a package missing from the list is then found even on a machine that has it.

usage: tools/check_packages.py [--root DIR] [--list FILE]
"""
import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from typing import Dict, Iterator, List, Optional, Set, Tuple

SHELL_WORDS = {
    # keywords and builtins of bash (man bash, SHELL BUILTIN COMMANDS)
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case",
    "esac", "in", "function", "select", "time", "coproc", "!", "{", "}", "[", "[[", "]]",
    ".", ":", "source", "alias", "bg", "bind", "break", "builtin", "caller", "cd",
    "command", "compgen", "complete", "continue", "declare", "dirs", "disown", "echo",
    "enable", "eval", "exec", "exit", "export", "false", "fc", "fg", "getopts", "hash",
    "help", "history", "jobs", "kill", "let", "local", "logout", "mapfile", "popd",
    "printf", "pushd", "pwd", "read", "readarray", "readonly", "return", "set", "shift",
    "shopt", "suspend", "test", "times", "trap", "true", "type", "typeset", "ulimit",
    "umask", "unalias", "unset", "wait",
}
# words that run the command after them (their own options and operands skipped)
PREFIXES = {"exec", "timeout", "env", "sudo", "time", "!", "nice", "command", "nohup", "then",
            "do", "else", "if", "while", "until", "{"}


def read_list(path: str) -> Tuple[Set[str], Set[Tuple[str, str]]]:
    """The packages of the list, and the commands it says come from elsewhere:
    `cmd:NAME` (anywhere) or `cmd:NAME@FILE` (in that file only), the lent GPU
    machine's own CUDA driver, toolkit and PyTorch."""
    names, elsewhere = set(), set()
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if line and line[0].startswith("cmd:"):
                cmd, _, where = line[0][4:].partition("@")
                elsewhere.add((cmd, where))
            elif line:
                names.add(line[0])
    return names, elsewhere


def repo_files(root: str) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames
                       if not d.startswith("build") and d not in (".git", "__pycache__")
                       and not (rel == "." and d.startswith("."))
                       or (rel == "." and d == ".ci")]
        for name in filenames:
            yield os.path.join(dirpath, name)


def shell_code(text: str) -> str:
    """The script with quoted text, comments and here-documents blanked (newlines
    kept, so line numbers hold); command substitutions inside double quotes stay code."""
    out = []
    i, n = 0, len(text)
    state = ["code"]  # stack: code, sq, dq; a code frame inside dq is a $( )
    depth = [0]       # parentheses open in each code frame
    heredocs: list = []
    while i < n:
        c = text[i]
        top = state[-1]
        if c == "\n":
            out.append("\n")
            i += 1
            if heredocs and top == "code":
                while heredocs and i < n:  # skip each pending here-document's body
                    end = text.find("\n", i)
                    end = n if end < 0 else end
                    line = text[i:end]
                    out.append("\n")
                    i = end + 1
                    if line.strip() == heredocs[0]:
                        heredocs.pop(0)
            continue
        if top == "sq":
            if c == "'":
                state.pop()
            out.append("@" if c != "'" else " ")
            i += 1
            continue
        if top == "dq":
            if c == "\\":
                out.append("@@")
                i += 2
                continue
            if c == '"':
                state.pop()
                out.append(" ")
                i += 1
                continue
            if text.startswith("$(", i) and not text.startswith("$((", i):
                state.append("code")
                depth.append(0)
                out.append(" ; ")
                i += 2
                continue
            out.append("@")
            i += 1
            continue
        # code
        if c == "\\":
            out.append("  ")
            i += 2
            continue
        if c == "'":
            state.append("sq")
            out.append(" ")
            i += 1
            continue
        if c == '"':
            state.append("dq")
            out.append(" ")
            i += 1
            continue
        if c == "#" and (i == 0 or text[i - 1] in " \t\n;"):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if text.startswith("<<", i) and not text.startswith("<<<", i):

            m = re.match(r"<<-?\s*['\"]?(\w+)['\"]?", text[i:])
            if m:
                heredocs.append(m.group(1))
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
                continue
        if text.startswith("$((", i) or text.startswith("((", i):
            end = text.find("))", i)
            end = n if end < 0 else end + 2
            out.append(" " + "\n" * text.count("\n", i, end))
            i = end
            continue
        if c == "(":
            depth[-1] += 1
        elif c == ")":
            if depth[-1] == 0 and len(state) > 1:
                state.pop()
                depth.pop()
                out.append(" ; ")
                i += 1
                continue
            depth[-1] = max(0, depth[-1] - 1)
        out.append(c)
        i += 1
    return "".join(out)


def shell_segments(text: str) -> Iterator[Tuple[int, str]]:
    """(line number, text) of each simple command of a shell script."""
    for no, line in enumerate(shell_code(text).splitlines(), 1):
        line = line.replace("<(", "(")
        line = re.sub(r"\b\w+\+?=\([^)]*\)", " ", line)  # an array assignment
        line = re.sub(r"\d*(>>|>|<<<|<)&?-?\s*[^\s;|&()]*", " ", line)  # redirections
        line = re.sub(r"^\s*[^\s;()]+\)", " ", line)  # a case pattern
        line = re.sub(r"\[\[.*?\]\]|\[ .*? \]", " ", line)  # tests: operands only
        for seg in re.split(r"\|\||&&|;;|[|;&()`]", line):
            yield no, seg


def first_commands(seg: str) -> List[str]:
    """The command a simple command runs, and the compiler it names in CC= or CXX=."""
    words = seg.split()
    found: List[str] = []
    i = 0
    while i < len(words):
        w = words[i].strip("\"")
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\[.*\])?\+?=", w):  # assignment
            if re.match(r"^(CC|CXX)=[\w./+-]+$", w):  # the compiler a build is told to use
                found.append(w.split("=", 1)[1])
            i += 1
            continue
        if w in PREFIXES:
            i += 1
            while i < len(words) and (words[i].startswith("-") or re.match(r"^[0-9.]+[smh]?$", words[i])
                                      or (w == "env" and "=" in words[i])):
                if words[i] in ("-u",) and w == "env":
                    i += 1
                i += 1
            continue
        return found + [w]
    return found


def shell_commands(text: str) -> Iterator[Tuple[int, str]]:
    """(line, command) of every external command a shell script runs."""
    defined = set(re.findall(r"^\s*(?:function\s+)?([A-Za-z_][\w-]*)\s*\(\)", text, re.M))
    for no, seg in shell_segments(text):
        for cmd in first_commands(seg):
            if cmd in SHELL_WORDS or cmd in defined:
                continue
            if cmd.startswith(("-", "*", "~")) or any(c in cmd for c in "$=@"):
                continue  # a variable's or quoted word's value, an option or a pattern
            if not cmd.startswith("/") and "/" in cmd:
                continue  # a script or program of the repository or the build
            if re.match(r"^[\w./+-]+$", cmd):
                yield no, cmd


def cmake_names(texts: List[str]) -> Set[str]:
    """The first argument of every CMake call of the tree: the targets it defines
    (add_executable(x ...), reshard_fake_test(x ...)), which add_test runs by name."""
    return {m.group(1) for t in texts for m in re.finditer(r"\b\w+\(\s*([\w.+-]+)[\s)]", t)}


def cmake_test_commands(text: str) -> Iterator[Tuple[int, str]]:
    for m in re.finditer(r"add_test\s*\(\s*NAME\s+\S+\s+COMMAND\s+(\S+)(?:\s+(-c)\s+\"((?:[^\"\\]|\\.)*)\")?",
                         text):
        no = text.count("\n", 0, m.start()) + 1
        word = m.group(1)
        if not word.startswith("$"):
            yield no, word
        if m.group(2) and word in ("bash", "sh"):
            inline = m.group(3).replace('\\"', '"')
            for _, cmd in shell_commands(inline):
                yield no, cmd


def python_imports(text: str) -> Iterator[Tuple[int, str]]:
    for no, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*(?:import\s+([\w.]+(?:\s*,\s*[\w.]+)*)|from\s+([\w.]+)\s+import\b)", line)
        if not m:
            continue
        if m.group(1):
            for name in m.group(1).split(","):
                yield no, name.strip().split(".")[0]
        elif not m.group(2).startswith("."):
            yield no, m.group(2).split(".")[0]


class Dpkg:
    """What dpkg knows of the installed packages: one query for all of them."""

    def __init__(self) -> None:
        self.owner: Dict[str, Optional[str]] = {}
        self.depends: Dict[str, List[str]] = {}
        self.base: Set[str] = set()
        self.installed: Set[str] = set()
        fmt = "${Package};${Depends}, ${Pre-Depends};${Essential} ${Priority};${db:Status-Abbrev}\n"
        r = subprocess.run(["dpkg-query", "-W", "-f", fmt], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            name, deps, kind, status = (line.split(";") + ["", "", ""])[:4]
            if status.startswith("ii"):
                self.installed.add(name)
            self.depends[name] = [re.sub(r"\(.*?\)|:\w+", "", a).strip()
                                  for a in re.split(r"[,|]", deps)]
            if "yes" in kind.split() or "required" in kind.split():
                self.base.add(name)

    @staticmethod
    def ways(path: str) -> List[str]:
        """The names dpkg may know a file by: Debian 12 merged /bin into /usr/bin,
        but many packages still list their files under /bin."""
        real = os.path.realpath(path)
        alt = [re.sub(r"^/usr/(s?bin|lib)/", r"/\1/", p) for p in (path, real)]
        return list(dict.fromkeys([path, real] + alt))

    def learn_owners(self, paths: List[str]) -> None:
        """Ask dpkg once for the packages of all these files."""
        todo = sorted({w for p in paths for w in self.ways(p)} - set(self.owner))
        if not todo:
            return
        r = subprocess.run(["dpkg", "-S"] + todo, capture_output=True, text=True)
        for ln in r.stdout.splitlines():
            if ln.startswith("diversion ") or ": " not in ln:
                continue
            pkgs, path = ln.split(": ", 1)
            self.owner.setdefault(path, pkgs.split(",")[0].split(":")[0].strip())

    def package_of(self, path: str) -> Optional[str]:
        for p in self.ways(path):
            if self.owner.get(p):
                return self.owner[p]
        return None

    def closure(self, names: Set[str]) -> Set[str]:
        """The packages and every package they depend on (installing them installs those)."""
        todo, seen = list(names), set(names)
        while todo:
            for dep in self.depends.get(todo.pop(), []):
                if dep and dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen

    def everywhere(self, pkg: str) -> bool:
        """Essential or Priority required: on every Debian system."""
        return pkg in self.base


def local_modules(root: str, files: List[str]) -> Set[str]:
    names = set()
    for f in files:
        if f.endswith(".py"):
            names.add(os.path.splitext(os.path.basename(f))[0])
            if os.path.basename(f) == "__init__.py":
                names.add(os.path.basename(os.path.dirname(f)))
    return names


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(here), help="the tree to check")
    ap.add_argument("--list", default=None, help="the package list (default ROOT/tools/packages.txt)")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    listed, elsewhere = read_list(args.list or os.path.join(root, "tools", "packages.txt"))
    dpkg = Dpkg()
    absent = sorted(listed - dpkg.installed)
    if absent:
        print(f"SKIP: the guard traces what the list installs, and {' '.join(absent)} "
              "is not installed (tools/apt-install.sh --all installs the list)")
        return 77
    installed_by_list = dpkg.closure(listed)
    files = sorted(repo_files(root))
    own = local_modules(root, files)
    needs: List[Tuple[str, int, str, str]] = []  # (file, line, kind, name)
    cmake_texts = []
    for f in files:
        rel = os.path.relpath(f, root)
        base = os.path.basename(f)
        try:
            with open(f, encoding="utf-8") as fh:
                text = fh.read()
        except (UnicodeDecodeError, OSError):
            continue
        if base.endswith(".sh") or rel == os.path.join(".ci", "run"):
            needs += [(rel, no, "command", c) for no, c in shell_commands(text)]
        elif base == "CMakeLists.txt" or base.endswith(".cmake"):
            cmake_texts.append(text)
            needs += [(rel, no, "command", c) for no, c in cmake_test_commands(text)]
        elif base.endswith(".py"):
            needs += [(rel, no, "module", m) for no, m in python_imports(text)
                      if m not in sys.stdlib_module_names and m not in own and m != "__future__"]
    targets = cmake_names(cmake_texts)
    needs = [n for n in needs if not (n[0].endswith((".txt", ".cmake")) and n[3] in targets)]
    needs = [n for n in needs if n[2] != "command" or ((n[3], "") not in elsewhere
                                                       and (n[3], n[0]) not in elsewhere)]
    found: Dict[Tuple[str, str], Optional[str]] = {}  # (kind, name) -> the file it runs
    for _, _, kind, name in needs:
        if (kind, name) in found:
            continue
        if kind == "command":
            if name.startswith("/"):
                path = name if os.access(name, os.X_OK) else None
            else:
                path = shutil.which(name)
        else:
            spec = importlib.util.find_spec(name)
            path = spec.origin if spec and spec.origin not in (None, "built-in", "frozen") else None
            if spec and path is None and spec.submodule_search_locations:
                path = list(spec.submodule_search_locations)[0]
        found[(kind, name)] = path
    dpkg.learn_owners([p for p in found.values() if p])
    problems = []
    for rel, no, kind, name in needs:
        path = found[(kind, name)]
        why = ""
        if path is None:
            why = "is not installed, and so no package of the list provides it"
        else:
            pkg = dpkg.package_of(path)
            if pkg is None:
                why = f"is {path}, which no Debian package installed"
            elif kind == "module" and pkg not in listed:
                why = f"comes from the package {pkg}, which the list does not name"
            elif pkg not in installed_by_list and not dpkg.everywhere(pkg):
                why = f"comes from the package {pkg}, which the list lacks"
        if why:
            problems.append(f"{rel}:{no}: {kind} {name} {why}")
    if problems:
        print("check_packages: add what these need to tools/packages.txt (or use a listed one):",
              file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    print(f"check_packages: {len(needs)} uses of {len(found)} commands and modules in "
          f"{len(files)} files, each from a listed or base package")
    return 0


if __name__ == "__main__":
    sys.exit(main())
