"""The package's modules import one way: no circle, lazy imports inside functions
included (the Rust side's tests/layers.rs holds the crates to the same)."""

import ast
import pathlib

PKG = pathlib.Path(__file__).resolve().parent.parent / "tpusim"


def imports(path, modules):
    """The package's `modules` that `path` imports, anywhere in it (a name the package
    itself defines stands for ``__init__``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.level == 1 or (node.module or "").startswith("tpusim")):
            module = (node.module or "").removeprefix("tpusim").lstrip(".") if node.level == 0 else node.module
            if module:
                out.add(module.split(".")[0])
            else:
                out.update(a.name if a.name in modules else "__init__" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update("__init__" for a in node.names if a.name.split(".")[0] == "tpusim")
    return out


def circle(graph):
    """One circle of `graph` (module -> modules it imports), or None."""
    state = {}

    def visit(m, path):
        state[m] = "open"
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                return path[path.index(n) :] + [n]
            if n not in state:
                found = visit(n, path + [n])
                if found:
                    return found
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def test_the_package_has_no_import_circle():
    mods = {p.stem: p for p in PKG.glob("*.py")}
    native = {p.name.split(".")[0] for p in PKG.glob("*.so")} | {"_native"}  # the extension
    graph = {m: {n for n in imports(p, mods.keys() | native) if n in mods and n != m} for m, p in mods.items()}
    assert circle(graph) is None, circle(graph)


def test_the_detector_finds_a_circle():
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b"}, "b": set()}) is None
