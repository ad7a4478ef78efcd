"""The package's import graph: no module imports another that (through others) imports it back,
and no module imports another's private name. Every import counts, also one inside a function
(those were how circles hid); only ``if TYPE_CHECKING:`` blocks are left out."""

import ast
import functools
import pathlib

import networkx as nx

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "dflow"


def module_files() -> dict[str, tuple[pathlib.Path, bool]]:
    """Module name -> (its file, whether it is a package's ``__init__``)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for inner in ast.walk(node))
    return skipped


def _imported(node: ast.AST, package: str) -> list[tuple[str, str | None]]:
    """(module, name or None) of each thing an import statement brings in."""
    if isinstance(node, ast.Import):
        return [(alias.name, None) for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = package.split(".")[:len(package.split(".")) - node.level + 1]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    return [(module, alias.name) for alias in node.names]


@functools.cache
def import_graph() -> tuple[nx.DiGraph, list[tuple[str, str, str]]]:
    """The dflow modules' import graph, and every (importer, module, private name) import."""
    modules = module_files()

    def resolve(name: str) -> str | None:  # the innermost dflow module that ``name`` names
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph, private = nx.DiGraph(), []
    for name, (path, is_package) in modules.items():
        graph.add_node(name)
        tree = ast.parse(path.read_text())
        skipped = _type_checking_nodes(tree)
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            for module, imported in _imported(node, package):
                if not module.startswith("dflow"):
                    continue
                target = f"{module}.{imported}" if f"{module}.{imported}" in modules else resolve(module)
                if target is None or target == name:
                    continue
                graph.add_edge(name, target)
                if imported and imported.startswith("_") and not imported.startswith("__"):
                    private.append((name, target, imported))
    return graph, private


def test_the_import_graph_has_no_cycle():
    graph, _ = import_graph()
    assert graph.number_of_nodes() > 100  # (the walk found the package)
    cycles = [" -> ".join([*cycle, cycle[0]]) for cycle in nx.simple_cycles(graph)]
    assert cycles == [], f"{len(cycles)} import cycle(s), e.g. {sorted(cycles, key=len)[:5]}"


def test_no_module_imports_a_private_name_of_another():
    _, private = import_graph()
    assert private == []
