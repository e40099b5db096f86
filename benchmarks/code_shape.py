"""The code's shape per package: modules, lines, function length (median, 90th percentile) and
the import circles among ``vtoken`` modules (tests/test_layout.py keeps them at none).

    python benchmarks/code_shape.py [ROOT]
"""

import ast
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def function_lengths(tree: ast.AST) -> list[int]:
    return [n.end_lineno - n.lineno + 1 for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every ``vtoken`` module this one imports, at any depth (lazy imports included)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = module if is_package else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = node.module if not node.level else ".".join(filter(None, [base, node.module]))
            out |= {target} | {f"{target}.{a.name}" for a in node.names}
    return {m for m in out if m.startswith("vtoken")}


def import_graph(root: Path) -> dict[str, set[str]]:
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text())
        targets = imported(tree, name, path.name == "__init__.py")
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v), on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while not scc or scc[-1] != v:
                scc.append(stack.pop()), on.discard(scc[-1])
            if len(scc) > 1:
                out.append(sorted(scc))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def package_of(path: Path, root: Path) -> str:
    rel = path.relative_to(root).parts
    return "/".join(rel[:2]) if len(rel) > 2 and rel[0] == "bench" else (rel[0] if len(rel) > 1 else ".")


def main(root: Path) -> None:
    rows = defaultdict(lambda: [0, 0, []])
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        row = rows[package_of(path, root)]
        row[0] += 1
        row[1] += len(path.read_text().splitlines())
        row[2] += function_lengths(tree)
    print("| package | modules | lines | functions | median | p90 |\n|---|---|---|---|---|---|")
    for name, (mods, lines, lengths) in sorted(rows.items()):
        lengths.sort()
        p90 = lengths[int(0.9 * (len(lengths) - 1))] if lengths else 0
        median = statistics.median(lengths) if lengths else 0
        print(f"| vtoken/{name} | {mods} | {lines} | {len(lengths)} | {median:g} | {p90} |")
    found = circles(import_graph(root))
    print(f"\nimport circles: {len(found)}")
    for c in found:
        print("  " + " <-> ".join(c))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "vtoken").resolve())
