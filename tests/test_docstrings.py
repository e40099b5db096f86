"""Docstrings stay true: every module, name, file and test file a docstring mentions exists.

Walks the module, class and function docstrings (``ast``; nothing is imported, so vLLM stays out)
of ``vtoken/``, ``baselines/``, ``benchmarks/`` and ``workflows/scripts/``. Four kinds of mention:

* dotted: a name starting ``vtoken.`` or ``baselines.`` (bare, in double backticks or in a
  ``:func:``-style role; a call's ``(...)`` is not part of it). Its longest prefix that is a
  module file on disk (``.py`` or a package) must exist, and the rest must be found in that
  module's source: a top-level def, class, assignment or import, then a member of that class
  (method, attribute, dataclass field; inherited from an in-repo base counts), for as long as
  the path goes through classes. A function, variable or import ends the check there.
* role: any other ``:mod:``/``:func:``/``:class:``/``:meth:``/``:attr:`` target. ``.x`` is
  relative to the file's package; a bare ``Name`` or ``Class.member`` must be defined in an
  enclosing class, the module (an import counts) or one of the module's classes.
* path: ``tests/...``, ``vtoken/...``, ``baselines/...``, ``benchmarks/...``, ``workflows/...``,
  ``docs/...`` (a ``#anchor`` dropped) must exist; one with ``*``, ``<``, ``{``, ``…`` or
  ``...`` is a pattern and is skipped.
* test file: a bare ``test_*.py`` must exist somewhere under ``tests/``.
"""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("vtoken", "baselines", "benchmarks", "workflows/scripts")
DOTTED = re.compile(r"(?<![\w./-])(?:vtoken|baselines)(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w./-])(?:tests|vtoken|baselines|benchmarks|workflows|docs)/[\w./*<>{}…#-]*")
ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|obj|exc|const):`~?(\.*[A-Za-z_][\w.]*)`")
TEST_FILE = re.compile(r"(?<![\w/])test_\w+\.py\b")
PATTERN_MARKS = ("*", "<", "{", "…", "...")


def docstrings(node, scopes=()):
    """(first line, raw text, enclosing module and classes) of every docstring under ``node``."""
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        scopes = (*scopes, node) if isinstance(node, (ast.Module, ast.ClassDef)) else scopes
        first = node.body[0] if node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                and isinstance(first.value.value, str):
            yield first.value.lineno, first.value.value, scopes
    for child in ast.iter_child_nodes(node):
        yield from docstrings(child, scopes)


def module_file(root: Path, parts):
    path = root.joinpath(*parts)
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def members(body):
    """Name -> node for what a module or class body defines (defs, classes, assignments, imports)."""
    found = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in getattr(node, "targets", None) or [node.target]:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        found[name.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update((a.asname or a.name.split(".")[0], node) for a in node.names)
        elif isinstance(node, (ast.If, ast.Try, ast.ExceptHandler)):  # guarded definitions
            found.update(members(node.body + getattr(node, "orelse", []) + getattr(node, "handlers", [])))
    return found


def member(scope, name, module, root):
    """(node, its module) that ``name`` names in a module or a class, inherited from the class's
    in-repo bases too (a base outside the repo, vLLM's say, is not read); (None, None) if none."""
    node = members(scope.body).get(name)
    if node is not None or not isinstance(scope, ast.ClassDef):
        return node, module
    for base in scope.bases:
        base = base.value if isinstance(base, ast.Subscript) else base
        cls, where = member(module, base.id, module, root) if isinstance(base, ast.Name) else (None, None)
        if isinstance(cls, ast.ImportFrom):
            path = cls.level == 0 and module_file(root, cls.module.split("."))
            if not path:
                continue
            where = ast.parse(path.read_text())
            cls, where = member(where, next(a.name for a in cls.names if (a.asname or a.name) == base.id),
                                where, root)
        if isinstance(cls, ast.ClassDef) and (found := member(cls, name, where, root))[0] is not None:
            return found
    return None, None


def found_in(scope, names, module, root) -> bool:
    """``names`` is defined in ``scope``, then in each class it goes through; a function, variable
    or import ends the path (its attributes are not followed)."""
    for name in names:
        node, module = member(scope, name, module, root)
        if node is None:
            return False
        if not isinstance(node, ast.ClassDef):
            return True
        scope = node
    return True


def resolves(dotted: str, root: Path = REPO) -> bool:
    parts = dotted.split(".")
    cut = next((n for n in range(len(parts), 0, -1) if module_file(root, parts[:n])), None)
    if cut is None:
        return False
    module = ast.parse(module_file(root, parts[:cut]).read_text())
    return found_in(module, parts[cut:], module, root)


def role_resolves(target: str, file: Path, scopes, root: Path) -> bool:
    """A role's target: ``.x`` is relative to the file's package; a bare name is looked up in the
    enclosing classes (innermost first), the module, then the module's classes."""
    if target.startswith("."):
        package = file.parent.relative_to(root).parts
        up = len(target) - len(target.lstrip(".")) - 1
        return resolves(".".join(package[:len(package) - up] + (target.lstrip("."),)), root)
    classes = [node for node in scopes[0].body if isinstance(node, ast.ClassDef)]
    return any(found_in(scope, target.split("."), scopes[0], root) for scope in [*scopes[::-1], *classes])


def stale_mentions(root: Path = REPO, roots=ROOTS):
    """('file:line', kind, mention) for every docstring mention that does not resolve."""
    tests = {p.name for p in (root / "tests").rglob("test_*.py")}
    checked, bad = dict.fromkeys(("dotted", "role", "path", "test file"), 0), []
    for top in roots:
        for file in sorted((root / top).rglob("*.py")):
            for line, text, scopes in docstrings(ast.parse(file.read_text())):
                def check(kind, m, ok, mention=None):
                    checked[kind] += 1
                    if not ok:
                        where = f"{file.relative_to(root)}:{line + text[:m.start()].count(chr(10))}"
                        bad.append((where, kind, mention or m.group()))
                for m in DOTTED.finditer(text):
                    check("dotted", m, resolves(m.group(), root))
                for m in ROLE.finditer(text):
                    if not DOTTED.fullmatch(m.group(1)):
                        check("role", m, role_resolves(m.group(1), file, scopes, root), m.group(1))
                for m in PATH.finditer(text):
                    path = m.group().split("#")[0].rstrip(".,:;")
                    if not any(mark in path for mark in PATTERN_MARKS):
                        check("path", m, (root / path).exists(), path)
                for m in TEST_FILE.finditer(text):
                    check("test file", m, m.group() in tests)
    return checked, bad


def test_every_docstring_mention_resolves():
    checked, bad = stale_mentions()
    assert sum(checked.values()) > 300, checked  # the walk reached the docstrings
    assert not bad, "stale docstring mentions:\n" + "\n".join(f"{where} {kind} {name}" for where, kind, name in bad)


def test_the_checker_reports_what_does_not_resolve(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_here.py").write_text("")
    pkg = tmp_path / "vtoken"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "base.py").write_text("class Base:\n    def inherited(self): ...\n")
    (pkg / "real.py").write_text(
        '"""Uses :func:`vtoken.real.Thing.go`, ``vtoken.real.LIMIT``, :mod:`.base`; not\n'
        '``vtoken.gone.f`` or :mod:`.nope`."""\n'
        "from vtoken.base import Base\n"
        "LIMIT = 3\n"
        "class Thing(Base):\n"
        "    def go(self):\n"
        '        """Like vtoken.real.Thing.stop(), :meth:`go`, :meth:`inherited`, :meth:`halt`; see\n'
        '        tests/test_here.py, tests/test_gone.py, test_arm_literals.py, tests/<name>.py."""\n')
    checked, bad = stale_mentions(tmp_path, ("vtoken",))
    assert checked == {"dotted": 4, "role": 5, "path": 2, "test file": 1}
    assert bad == [("vtoken/real.py:2", "dotted", "vtoken.gone.f"),
                   ("vtoken/real.py:2", "role", ".nope"),
                   ("vtoken/real.py:7", "dotted", "vtoken.real.Thing.stop"),
                   ("vtoken/real.py:7", "role", "halt"),
                   ("vtoken/real.py:8", "path", "tests/test_gone.py"),
                   ("vtoken/real.py:8", "test file", "test_arm_literals.py")]
