"""The project's shape rule: no function in aiayn/ over 80 lines, counted from its ``def`` line to its last line,
docstring lines excluded (decorators are not counted; nested functions are measured on their own and inside
their parent)."""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 80

#: functions allowed over the limit for now, {qualified name: why}; empty: every function in aiayn/ keeps the rule
ALLOWED: dict[str, str] = {}


def _docstring_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno - first.lineno + 1
    return 0


def function_lengths(source: str, module: str) -> dict[str, int]:
    """``{qualified name: lines from the def line to the end, less the docstring's}`` of every function and method
    in ``source`` (nested ones too, as ``outer.<locals>.inner``)."""
    out: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}.{child.name}"
                out[name] = child.end_lineno - child.lineno + 1 - _docstring_lines(child)
                walk(child, name + ".<locals>")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}.{child.name}")
            else:
                walk(child, prefix)

    walk(ast.parse(source), module)
    return out


def package_lengths() -> dict[str, int]:
    lengths: dict[str, int] = {}
    for path in sorted((ROOT / "aiayn").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        lengths.update(function_lengths(path.read_text(encoding="utf-8"), module))
    return lengths


def test_no_function_in_the_package_is_over_the_limit():
    lengths = package_lengths()
    assert len(lengths) > 300  # the walk found the package's functions
    over = {name: n for name, n in lengths.items() if n > LIMIT and name not in ALLOWED}
    assert not over, f"functions over {LIMIT} lines (docstring excluded); split them into named steps: {over}"


def test_the_allow_list_holds_only_functions_still_over_the_limit():
    lengths = package_lengths()
    stale = {name: lengths.get(name, "gone") for name in ALLOWED if lengths.get(name, 0) <= LIMIT}
    assert not stale, f"take these off ALLOWED, they are within {LIMIT} lines now (or renamed): {stale}"


def _function(name: str, body_lines: int, docstring_lines: int = 0, indent: str = "") -> str:
    doc = ['    """' + "x" * 10] + ["    doc"] * max(0, docstring_lines - 2) + ['    """'] if docstring_lines else []
    body = [f"    x{i} = {i}" for i in range(body_lines)]
    return textwrap.indent("\n".join([f"def {name}():", *doc, *body]) + "\n", indent)


@pytest.mark.parametrize("body, expected", [(79, 80), (80, 81)])
def test_the_count_runs_from_the_def_line_to_the_end(body, expected):
    lengths = function_lengths(_function("f", body), "m")
    assert lengths == {"m.f": expected}


def test_a_long_function_fails_and_its_docstring_does_not_count():
    source = "@decorator\n" + _function("long", 81) + _function("documented", 70, docstring_lines=30)
    lengths = function_lengths(source, "m")
    assert lengths == {"m.long": 82, "m.documented": 71}
    assert [name for name, n in lengths.items() if n > LIMIT] == ["m.long"]


def test_methods_and_nested_functions_are_measured():
    source = "class C:\n" + _function("method", 3, indent="    ") + _function("outer", 2) + _function("inner", 90, indent="    ")
    lengths = function_lengths(source, "m")
    assert lengths == {"m.C.method": 4, "m.outer": 94, "m.outer.<locals>.inner": 91}
