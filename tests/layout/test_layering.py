"""The import layering of the ``extql`` package, read statically from the source.

Every module belongs to one layer, and imports only from its own layer and the
layers below it:

    spec  <-  kernels  <-  api  <-  onnx  <-  tools  <-  cli

* spec: the facts written once (the package :mod:`extql.rules`: the type
  table, every operator's rules; the kernels' entry points);
* kernels: the compiled extension;
* api: the NumPy API of every operator (the package :mod:`extql.api`) and the
  registration of the onnxruntime library;
* onnx: what works on ONNX models and onnxscript -- graph helpers, checks,
  schemas, fallbacks, reference ops, the onnxscript integration;
* tools: the graph passes (:mod:`extql.tools`);
* cli: the ``extql`` command.

The graph counts every ``import`` statement, function-level ones too (an
import inside a function is a dependency all the same), and must have no
cycle at all.  A new module must be given a layer in :data:`LAYERS`, and the
package's root holds only the modules of :data:`ROOT_MODULES`: an operator's
NumPy API goes into :mod:`extql.api`, its rules into :mod:`extql.rules`.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "extql"

#: The layers, lowest first: module name patterns (fnmatch) of each.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("spec", ("extql.rules", "extql.rules.*", "extql._entrypoints", "extql._version")),
    ("kernels", ("extql._kernels", "extql.kernels.*")),
    ("api", ("extql", "extql.api", "extql.api.*", "extql.ort")),
    ("onnx", ("extql.onnx", "extql.onnx.*", "extql.fallbacks", "extql.reference", "extql.opset",
              "extql.ort_io", "extql.ort_levels")),
    ("tools", ("extql.tools", "extql.tools.*")),
    ("cli", ("extql.cli", "extql.cli.*", "extql.__main__")),
]
#: The modules of the package's root: the package itself, the compiled
#: extension's wrappers and what the build reads, the onnxruntime glue, and the
#: public ONNX-side modules (fallbacks, reference ops, the onnxscript opset).
ROOT_MODULES = frozenset({
    "extql", "extql.__main__", "extql._version", "extql._entrypoints", "extql._kernels",
    "extql.ort", "extql.ort_io", "extql.ort_levels", "extql.fallbacks", "extql.reference",
    "extql.opset",
})
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}


def package_modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Module name -> source file, for every .py and .pyx module of the package."""
    modules: dict[str, Path] = {}
    for path in sorted(package.rglob("*")):
        if path.suffix not in (".py", ".pyx") or "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imported(module: str, is_package: bool, node: ast.AST, modules: dict) -> list[str]:
    """The extql modules one import statement refers to."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "extql"]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    if source.split(".")[0] != "extql":
        return []
    # ``from pkg import name``: the submodule where there is one, else pkg.
    return [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source
            for a in node.names]


def import_graph(package: Path = PACKAGE) -> dict[str, dict[str, str]]:
    """module -> {imported module: "module" or "function"} (where the first
    import of it stands: at module level, or inside a function or class)."""
    modules = package_modules(package)
    graph: dict[str, dict[str, str]] = {}
    for name, path in modules.items():
        edges: dict[str, str] = {}
        if path.suffix == ".py":
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            top = {id(n) for n in tree.body}
            for node in ast.walk(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    where = "module" if id(node) in top else "function"
                    for target in _imported(name, path.name == "__init__.py", node, modules):
                        if target != name and edges.get(target) != "module":
                            edges[target] = where
        else:
            # Cython: cimports of the package's own .pxd, none today.
            text = path.read_text(encoding="utf-8")
            edges = {m: "module" for m in modules if f"cimport {m}" in text and m != name}
        graph[name] = edges
    return graph


def layer_of(module: str) -> str | None:
    for layer, patterns in LAYERS:
        if any(fnmatch.fnmatchcase(module, p) for p in patterns):
            return layer
    return None


def cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in graph:
                continue
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def violations(graph: dict[str, dict[str, str]]) -> list[str]:
    """Every import of a higher layer, as ``a (layer) -> b (layer) [where]``."""
    out = []
    for module, edges in sorted(graph.items()):
        for target, where in sorted(edges.items()):
            a, b = layer_of(module), layer_of(target)
            if a is not None and b is not None and RANK[b] > RANK[a]:
                out.append(f"{module} ({a}) -> {target} ({b}) [{where}-level import]")
    return out


GRAPH = import_graph()


def test_the_graph_sees_the_package():
    """The reader finds the modules and both kinds of import (a broken reader
    would pass the tests below with an empty graph)."""
    assert {"extql", "extql.api.linear", "extql._kernels", "extql.tools.attach",
            "extql.cli"} <= set(GRAPH)
    assert GRAPH["extql.api.linear"].get("extql._kernels") == "module"
    assert "function" in {w for edges in GRAPH.values() for w in edges.values()}


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_every_module_has_a_layer(module):
    assert layer_of(module) is not None, (
        f"{module} belongs to no layer: add it to LAYERS in {Path(__file__).name}")


def test_the_root_holds_no_operator_modules():
    """Operators' NumPy API and rules live in their packages, not at the root."""
    root = {m for m in GRAPH if m.count(".") <= 1 and not (PACKAGE / m.split(".")[-1]).is_dir()}
    assert root - ROOT_MODULES == set(), (
        "modules at the extql root: put an operator's NumPy API into extql/api/ and its "
        "rules into extql/rules/")


def test_no_import_cycle():
    found = cycles(GRAPH)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_imports_go_down_the_layers():
    found = violations(GRAPH)
    assert not found, "imports against the layering:\n" + "\n".join(found)


def test_the_checks_catch_a_cycle_and_an_upward_import():
    """The two checks on a graph made wrong on purpose."""
    bad = {m: dict(edges) for m, edges in GRAPH.items()}
    bad["extql.rules.types"]["extql.tools.attach"] = "function"
    assert any("extql.rules.types" in c and "extql.tools.attach" in c for c in cycles(bad))
    assert any(v.startswith("extql.rules.types (spec) -> extql.tools.attach (tools)")
               for v in violations(bad))


def test_no_test_module_imports_another():
    """Shared builders live in helper modules of tests/ (contract.py,
    ortutil.py, ...), never in a test module another one imports."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(ROOT)} imports {n}" for n in names
                      if n.split(".")[0].startswith("test_")]
    assert not found, "\n".join(found)
