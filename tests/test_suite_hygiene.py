"""Patterns that make a test unable to fail, looked for in every file under tests/ (the suite
checks itself):

* a test function that checks nothing: no ``assert``, no ``pytest.raises``/``pytest.fail``, no
  ``raise``, and no use of a helper (a function defined under tests/) that checks something;
* an assert that is always true: on a constant or a tuple, ``... or True``, or a comparison of an
  expression with itself;
* ``except:`` / ``except Exception:`` / ``except BaseException:`` whose body only passes, in a
  test function;
* ``pytest.raises(Exception)`` (or BaseException) with neither ``match=`` nor ``as`` to look at
  what was raised;
* a skip, skipif or xfail without a reason.

And the layout of the helpers (`test_helpers_live_where_they_are_shared`): no module imports a
test module (``test_*.py``); a helper module of one test area (``tests/<area>/x.py``) is imported
only from that area; benchmarks import from ``tests`` only the support package
(``tests/support``), which both share.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

# tests whose check is that nothing but the expected errors escapes (fuzzing), by name
CHECKS_BY_NOT_RAISING = {
    "test_arbitrary_bytes_never_crash": "any error but FrameTooLarge or MalformedFrame fails it",
    "test_split_random_bytes_only_raises_malformed_batch": "any error but MalformedBatch fails it",
    "test_read_ahead_errors_are_counted_not_raised": "fails by timeout unless the error is counted, "
    "and if the error escapes",
}
_CHECK_CALLS = {"raises", "fail", "warns"}
_BROAD = {"Exception", "BaseException"}


@functools.cache
def _files() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), str(p))) for p in sorted(TESTS.rglob("*.py"))]


def _func(node: ast.expr) -> str:
    return ast.unparse(node)


def _checks_directly(fn: ast.AST) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, (ast.Assert, ast.Raise)):
            return True
        if isinstance(node, ast.Call) and _func(node.func).rsplit(".", 1)[-1] in _CHECK_CALLS:
            return True
    return False


def _names_used(fn: ast.AST) -> set[str]:
    """The plain names a function refers to (a helper is called or passed by its name)."""
    return {node.id for node in ast.walk(fn) if isinstance(node, ast.Name)}


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(TESTS.parent)}:{getattr(node, 'lineno', 0)}"


def _always_true(node: ast.Assert) -> bool:
    t = node.test
    return (
        isinstance(t, (ast.Constant, ast.Tuple))
        or (
            isinstance(t, ast.BoolOp)
            and isinstance(t.op, ast.Or)
            and any(isinstance(v, ast.Constant) and v.value for v in t.values)
        )
        or (isinstance(t, ast.Compare) and len(t.comparators) == 1 and ast.dump(t.left) == ast.dump(t.comparators[0]))
    )


def _unlooked_raises(node: ast.With | ast.AsyncWith) -> list[str]:
    out = []
    for item in node.items:
        call = item.context_expr
        if (
            isinstance(call, ast.Call)
            and _func(call.func) in ("pytest.raises", "raises")
            and call.args
            and ast.unparse(call.args[0]) in _BROAD
            and not any(k.arg == "match" for k in call.keywords)
            and item.optional_vars is None
        ):
            out.append(ast.unparse(call))
    return out


def _skip_without_reason(node: ast.AST) -> list[str]:
    out = []
    if isinstance(node, ast.Call):
        name = _func(node.func)
        if name in ("pytest.skip", "pytest.mark.skip", "pytest.xfail", "pytest.mark.xfail") and not (
            node.args or any(k.arg == "reason" for k in node.keywords)
        ):
            out.append(ast.unparse(node))
        if name == "pytest.mark.skipif" and not any(k.arg == "reason" for k in node.keywords):
            out.append(ast.unparse(node))
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        out += [
            f"@{ast.unparse(d)}"
            for d in node.decorator_list
            if ast.unparse(d) in ("pytest.mark.skip", "pytest.mark.xfail")
        ]
    return out


@functools.cache
def _findings() -> dict[str, list[str]]:
    """Every finding of the suite, by kind (one walk over every file)."""
    found: dict[str, list[str]] = {"nothing": [], "always": [], "swallow": [], "raises": [], "skip": []}
    uses: dict[str, set[str]] = {}
    checking: set[str] = set()
    tests: list[tuple[Path, ast.FunctionDef | ast.AsyncFunctionDef, bool, set[str]]] = []
    for path, tree in _files():
        for fn in tree.body:  # module-level helpers
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and not fn.name.startswith("test_"):
                uses.setdefault(fn.name, set()).update(_names_used(fn))
                if _checks_directly(fn):
                    checking.add(fn.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert) and _always_true(node):
                found["always"].append(f"{_where(path, node)} {ast.unparse(node)}")
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                found["raises"] += [f"{_where(path, node)} {c}" for c in _unlooked_raises(node)]
            found["skip"] += [f"{_where(path, node)} {c}" for c in _skip_without_reason(node)]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                tests.append((path, node, _checks_directly(node), _names_used(node)))
                for h in ast.walk(node):
                    if (
                        isinstance(h, ast.ExceptHandler)
                        and (h.type is None or ast.unparse(h.type) in _BROAD)
                        and all(isinstance(b, (ast.Pass, ast.Continue)) for b in h.body)
                    ):
                        found["swallow"].append(f"{_where(path, h)} in {node.name}")
    changed = True
    while changed:
        changed = False
        for name, used in uses.items():
            if name not in checking and used & checking:
                checking.add(name)
                changed = True
    found["nothing"] = [
        f"{_where(path, fn)} {fn.name}"
        for path, fn, direct, used in tests
        if not direct and not used & checking and fn.name not in CHECKS_BY_NOT_RAISING
    ]
    return found


def test_no_test_checks_nothing() -> None:
    assert not _findings()["nothing"], "tests that check nothing:\n" + "\n".join(_findings()["nothing"])


def test_no_assert_is_always_true() -> None:
    assert not _findings()["always"], "asserts that cannot fail:\n" + "\n".join(_findings()["always"])


def test_no_test_swallows_every_error() -> None:
    assert not _findings()["swallow"], "tests that swallow every error:\n" + "\n".join(_findings()["swallow"])


def test_no_raises_of_any_error_unlooked_at() -> None:
    assert not _findings()["raises"], "pytest.raises of any error, with nothing looked at:\n" + "\n".join(
        _findings()["raises"]
    )


def test_every_skip_says_why() -> None:
    assert not _findings()["skip"], "skips without a reason:\n" + "\n".join(_findings()["skip"])


# ------------------------------------------------------------------ where helpers live


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(path: Path) -> set[str]:
    """The ``tests.*`` and ``bench.*`` modules ``path`` imports (relative imports resolved; a name
    imported from a package counts as that submodule when there is one)."""
    tree = ast.parse(path.read_text(), str(path))
    me = _module_of(path).split(".")
    out = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = me if path.name == "__init__.py" else me[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] in ("tests", "bench") and (
                REPO.joinpath(*parts).with_suffix(".py").exists() or REPO.joinpath(*parts, "__init__.py").exists()
            ):
                out.add(name)
    return out


def _layout_problems(importer: Path, module: str) -> list[str]:
    parts = module.split(".")
    where = importer.relative_to(REPO).parts
    if parts[-1].startswith("test_"):
        return [
            f"{importer.relative_to(REPO)} imports the test module {module}: move what it shares to a "
            "helper module (or tests/support)"
        ]
    if where[0] == "bench" and parts[0] == "tests" and parts[1] != "support":
        return [f"{importer.relative_to(REPO)} imports {module}: benchmarks use tests.support only"]
    if (
        where[0] == "tests"
        and parts[0] == "tests"
        and len(parts) > 2
        and parts[1] != "support"
        and (len(where) < 3 or where[1] != parts[1])
    ):
        return [f"{importer.relative_to(REPO)} imports {module}, a helper of another area: move it to tests/support"]
    return []


def test_helpers_live_where_they_are_shared() -> None:
    files = sorted(TESTS.rglob("*.py")) + sorted((REPO / "bench").rglob("*.py"))
    problems = [p for f in files for m in sorted(_imported(f)) for p in _layout_problems(f, m)]
    assert not problems, "helpers in the wrong place:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("importer", "module", "refused"),
    [
        ("tests/retention/test_x.py", "tests.retention.test_retention_service", True),
        ("bench/x.py", "tests.standalone.standalone_proc", True),
        ("tests/bookie_server/test_x.py", "tests.bookie_gc.gc_helpers", True),
        ("tests/bookie_gc/test_x.py", "tests.bookie_gc.gc_helpers", False),
        ("bench/x.py", "tests.support.standalone", False),
        ("tests/broker/test_x.py", "tests.support.clients", False),
    ],
)
def test_the_layout_rule_refuses_what_it_should(importer: str, module: str, refused: bool) -> None:
    assert bool(_layout_problems(REPO / importer, module)) is refused
