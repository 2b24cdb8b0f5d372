"""The size limits of the house style, checked on the source: no module over 400 lines,
no class over 250, no function over 60."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "speechbatch"
MAX_MODULE, MAX_CLASS, MAX_FUNCTION = 400, 250, 60


def _sources() -> list[tuple[str, str]]:
    return [
        (path.relative_to(PACKAGE).as_posix(), path.read_text())
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def _span(node: ast.AST) -> int:
    end = getattr(node, "end_lineno", None) or 0
    start = min([getattr(d, "lineno", 0) for d in getattr(node, "decorator_list", [])] or [0])
    return end - (start or getattr(node, "lineno", 0)) + 1


def test_no_module_over_400_lines() -> None:
    over = {name: text.count("\n") for name, text in _sources() if text.count("\n") > MAX_MODULE}
    assert not over, f"modules over {MAX_MODULE} lines: {over}"


def test_no_class_over_250_lines_nor_function_over_60() -> None:
    over = []
    for name, text in _sources():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and _span(node) > MAX_CLASS:
                over.append(f"{name}: class {node.name} ({_span(node)} lines)")
            function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if function and _span(node) > MAX_FUNCTION:
                over.append(f"{name}: {getattr(node, 'name', '?')}() ({_span(node)} lines)")
    assert not over, "\n".join(over)
