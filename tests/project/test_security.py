"""Security properties that hold by construction, checked on the source itself.

- No input is ever unpickled: no pickle/marshal/torch.load/np.load(allow_pickle) calls.
  One exception, by construction too: the child Python a session starts to draw its page
  (report/child_writer.py) unpickles the report its parent writes on its stdin, a pipe between
  the two that nothing else can write to.
- Nothing runs code from input: no eval/exec/compile of strings, no shell=True.
(Rule expressions are covered in test_expr.py; HTML escaping in test_html.py; the gzip
limit in test_reader.py.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "diagnose"
FORBIDDEN_CALLS = {
    ("pickle", "load"), ("pickle", "loads"), ("pickle", "Unpickler"), ("marshal", "load"),
    ("marshal", "loads"), ("torch", "load"), ("dill", "load"), ("dill", "loads"),
    ("yaml", "load"), ("shelve", "open"),
}
FORBIDDEN_NAMES = {"eval", "exec", "compile", "__import__"}
#: (file, function) -> the one unpickling call allowed there
ALLOWED = {("report/child_writer.py", "main"): ("pickle", "loads")}


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def _dotted(func: ast.AST) -> tuple[str, ...]:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return tuple(reversed(parts))


SOURCES = sorted(PKG.rglob("*.py"))


def _allowed(path: Path, tree: ast.AST) -> set[int]:
    """Line numbers of the allowed unpickling calls in ``path`` (one per function named in
    ALLOWED, and exactly one: a second one there is not allowed)."""
    rel = path.relative_to(PKG).as_posix()
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and (rel, node.name) in ALLOWED:
            want = ALLOWED[(rel, node.name)]
            hits = [c.lineno for c in _calls(node) if _dotted(c.func)[-2:] == want]
            assert len(hits) == 1, (path, node.name, hits)
            lines.update(hits)
    return lines


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_unpickling_or_code_execution(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    allowed = _allowed(path, tree)
    for call in _calls(tree):
        name = _dotted(call.func)
        if len(name) >= 2 and call.lineno not in allowed:
            assert (name[-2], name[-1]) not in FORBIDDEN_CALLS, (path, call.lineno, name)
        if len(name) == 1:
            assert name[0] not in FORBIDDEN_NAMES, (path, call.lineno, name)
        for kw in call.keywords:
            if kw.arg in ("allow_pickle", "shell") and isinstance(kw.value, ast.Constant):
                assert kw.value.value is not True, (path, call.lineno, kw.arg)


def test_scan_sees_the_whole_package():
    assert len(SOURCES) > 20
