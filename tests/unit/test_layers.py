"""The layering of STYLE.md, checked on the source: only web/ (and the app factory and
CLI that assemble it) may import Flask; nothing below services imports requests."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "speechbatch"
ENTRYPOINTS = {"app.py", "cli.py"}


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def _modules_below_web() -> list[Path]:
    return sorted(
        p
        for p in PACKAGE.rglob("*.py")
        if "web" not in p.relative_to(PACKAGE).parts and p.name not in ENTRYPOINTS
    )


@pytest.mark.parametrize("framework", ["flask", "flask_wtf"])
def test_no_flask_below_web(framework: str) -> None:
    offenders = [
        str(p.relative_to(PACKAGE)) for p in _modules_below_web() if framework in _imported_roots(p)
    ]
    assert not offenders, f"{framework} imported below web/: {offenders}"


def test_only_providers_import_requests() -> None:
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in _modules_below_web()
        if "requests" in _imported_roots(p) and "providers" not in p.parts
    ]
    assert not offenders, f"requests imported outside providers/: {offenders}"
