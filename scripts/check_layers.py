#!/usr/bin/env python3
"""The layers contract of the streamtopic package, checked from its source (run by .ci/run).

    python scripts/check_layers.py            # the check: exit 1 on any breach
    python scripts/check_layers.py --report   # the figures too (imports, where they sit)

Each module of ``streamtopic/`` belongs to one layer of ``LAYERS`` (listed from the top
down). The check fails when

- a module imports a module of a higher layer (an *upward* import) or of its own layer;
- the modules' imports form a cycle (within a layer too);
- a module imports a private name (``_name``) of another module, or reaches one through an
  imported module (``module._name``), or reads off an object a private attribute that only
  other modules of the package define (``model._check_fitted()``); private *modules*
  (``_io``, ``_kernels``, ...) are the package's shared utilities and may be imported, their
  private names may not;
- a module of the package is in no layer, or a layer names a module that does not exist;
- a module imports another inside a function without a reason listed in ``DEFERRED``
  (start-up time, an optional dependency).

Every import counts wherever it sits: at module level, inside a function, or under
``if TYPE_CHECKING:``. A deferred import does not make an upward dependency go away.
The source is read, not imported: nothing of the package runs.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "streamtopic"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

# From the top down: a module may import only modules of lower layers (further down this
# list); modules of one layer are independent of each other.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("entry points", ("__main__",)),
    ("command line", ("cli",)),
    ("package", ("__init__",)),
    ("uses of the estimator", ("synth", "evaluation", "fitting", "updating")),
    ("estimator", ("model",)),
    ("views of a fitted model", ("notebook", "interop", "timeline")),
    ("uses of a fitted model", ("report", "inference")),
    ("a fit's stages in order, and saved models", ("pipeline", "persistence")),
    ("ingest, refinement and the spectral stages of a fit", ("cooccurrence", "refinement",
                                                             "spectral")),
    ("named anchors", ("seeding",)),
    ("spectral stages", ("hyperparameters", "anchors", "workspace")),
    ("spectral steps", ("rectification", "recovery", "sketch", "selection", "metrics",
                        "termmap", "drift")),
    ("passes and corpora", ("passes", "corpus")),
    ("store and tokenizer", ("store", "_tokenize")),
    ("services", ("cluster", "vocabulary", "_scratch", "_warmup")),
    ("utilities", ("_io", "_locking", "_kernels", "_pairs", "_numeric", "_params", "_stopwords",
                   "_gzindex", "_tarlist", "_version", "_random", "_dates", "doccache", "progress",
                   "fitted", "manifest", "limits")),
    ("digests", ("integrity",)),
]

#: Where an import of a package module may sit inside a function, and why: a module (all its
#: imports) or a (module, imported module) pair. Every other import is at module level.
DEFERRED: dict[str | tuple[str, str], str] = {
    "cli": "start-up time: `streamtopic --help` and each command load only what they run",
    ("notebook", "report"): "start-up time: Bokeh loads with the report, when one is drawn",
    ("_warmup", "_kernels"): "numba compiles the kernel in the warm-up's own process",
    ("cooccurrence", "_pairs"): "an optional dependency: the C extension, numba's otherwise",
    ("cooccurrence", "_kernels"): "start-up time: numba (0.3 s) only without the C extension",
}


@dataclass(frozen=True)
class Import:
    """One import of a package module by another."""

    source: str
    target: str
    names: tuple[str, ...]
    line: int
    deferred: bool  # inside a function (not at module level)
    type_only: bool  # under `if TYPE_CHECKING:`


def _modules(root: Path) -> list[str]:
    """The package's modules: its .py files and its C extensions."""
    names = {p.stem for p in root.glob("*.py")}
    names |= {p.name.split(".")[0] for p in root.glob("*.so")}
    names |= {p.stem for p in root.glob("*.c")}
    return sorted(names)


def _target(node: ast.ImportFrom | ast.Import, alias: ast.alias, modules: set[str]) -> str | None:
    """The package module an import alias names, or None for an outside import."""
    if isinstance(node, ast.Import):
        parts = alias.name.split(".")
        return parts[1] if parts[0] == PACKAGE and len(parts) > 1 else None
    base = node.module or ""
    if node.level == 0:
        if not base.startswith(PACKAGE):
            return None
        base = base[len(PACKAGE) + 1:]
    if base:
        return base.split(".")[0]
    return alias.name if alias.name in modules else "__init__"


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, deferred: bool, type_only: bool) -> Iterator[tuple[ast.AST, bool, bool]]:
    """Every node below ``node`` with whether it sits in a function / under TYPE_CHECKING."""
    for child in ast.iter_child_nodes(node):
        yield child, deferred, type_only
        in_def = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        in_tc = isinstance(child, ast.If) and _is_type_checking(child)
        yield from _walk(child, deferred or in_def, type_only or in_tc)


def _read(root: Path, module: str,
          modules: set[str]) -> tuple[list[Import], list[tuple[int, str]]]:
    """A module's package imports and its private uses of imported modules (line, text)."""
    path = root / f"{module}.py"
    if not path.exists():
        return [], []
    tree = ast.parse(path.read_text(), str(path))
    imports: list[Import] = []
    module_aliases: dict[str, str] = {}
    for node, deferred, type_only in _walk(tree, False, False):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for alias in node.names:
            target = _target(node, alias, modules)
            if target is None or target == module:
                continue
            is_module = isinstance(node, ast.Import) or (
                target == alias.name and not (node.module or "").split(".")[-1] == target)
            names = () if is_module else (alias.name,)
            if is_module:
                module_aliases[alias.asname or alias.name.split(".")[-1]] = target
            imports.append(Import(module, target, names, node.lineno, deferred, type_only))
    reached = [
        (node.lineno, f"{node.value.id}.{node.attr}")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        and node.value.id in module_aliases and _private(node.attr)
    ]
    return imports, reached


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(tree: ast.AST) -> set[str]:
    """The names a module defines or assigns: functions, classes, variables, attributes."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def _private_uses(tree: ast.AST) -> list[tuple[int, str, str]]:
    """The private attributes a module reads off objects other than ``self`` and ``cls``
    (``obj._name``, ``getattr(obj, "_name")``): (line, name, text)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append((node.lineno, node.attr, ast.unparse(node)))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _private(node.args[1].value)):
            found.append((node.lineno, node.args[1].value, ast.unparse(node)))
    return found


def _foreign_private(root: Path, modules: list[str]) -> list[str]:
    """Private attributes used in one module and defined only in others of the package."""
    trees = {m: ast.parse((root / f"{m}.py").read_text()) for m in modules
             if (root / f"{m}.py").exists()}
    defined = {m: _defined(t) for m, t in trees.items()}
    problems = []
    for m, tree in trees.items():
        for line, name, text in _private_uses(tree):
            owners = [o for o in trees if o != m and name in defined[o]]
            if name not in defined[m] and owners:
                problems.append(f"{PACKAGE}/{m}.py:{line}: private name {text} of "
                                f"{', '.join(owners)}")
    return problems


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def check(root: Path = ROOT, report: bool = False) -> list[str]:
    """The breaches of the contract by the package in ``root``, one line each (empty when it
    holds)."""
    modules = _modules(root)
    layer_of = {m: depth for depth, (_, layer) in enumerate(LAYERS) for m in layer}
    problems = [f"{PACKAGE}/{m}: in no layer of LAYERS" for m in modules if m not in layer_of]
    problems += [f"LAYERS names {m}, which is not a module" for m in layer_of if m not in modules]
    imports: list[Import] = []
    for module in modules:
        found, reached = _read(root, module, set(modules))
        imports += found
        problems += [f"{PACKAGE}/{module}.py:{line}: private name {text} of another module"
                     for line, text in reached]
    for imp in imports:
        where = f"{PACKAGE}/{imp.source}.py:{imp.line}"
        if imp.source in layer_of and imp.target in layer_of \
                and layer_of[imp.target] <= layer_of[imp.source]:
            how = "upward" if layer_of[imp.target] < layer_of[imp.source] else "same-layer"
            problems.append(f"{where}: {how} import of {imp.target} by {imp.source}")
        problems += [f"{where}: private name {imp.target}.{n} imported by {imp.source}"
                     for n in imp.names if _private(n)]
        if imp.deferred and imp.source not in DEFERRED \
                and (imp.source, imp.target) not in DEFERRED:
            problems.append(f"{where}: {imp.target} imported inside a function, with no "
                            "reason in DEFERRED")
    problems += _foreign_private(root, modules)
    edges: dict[str, set[str]] = {}
    for imp in imports:
        edges.setdefault(imp.source, set()).add(imp.target)
    problems += [f"import cycle: {', '.join(c)}" for c in _cycles(edges)]
    if report:
        _report(imports)
    return problems


def _report(imports: list[Import]) -> None:
    """Prints how many of the package's own import statements sit where."""
    statements = {(i.source, i.line): i for i in imports}.values()
    pairs = {(i.source, i.target) for i in imports}
    print(f"{len(statements)} import statements of package modules ({len(pairs)} module "
          f"pairs): {sum(not i.deferred and not i.type_only for i in statements)} at module "
          f"level, {sum(i.deferred for i in statements)} inside functions, "
          f"{sum(i.type_only for i in statements)} under TYPE_CHECKING")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", action="store_true", help="print the import figures too")
    parser.add_argument("--root", type=Path, default=ROOT, help="the package's directory")
    args = parser.parse_args()
    problems = check(args.root, report=args.report)
    for line in problems:
        print(line)
    print(f"layers contract: {'broken' if problems else 'holds'} "
          f"({len(problems)} breach{'es' if len(problems) != 1 else ''})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
