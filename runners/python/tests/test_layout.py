"""No module of the probe library (runners/python/infradev_probe) or of the subject's code
(runners/python/subject) imports a module that imports it back, directly or through others.

Read from the source: every ``import`` and ``from ... import`` statement of each module (at
the top, or inside a function, a class, a ``try``: anything ``ast.walk`` reaches), relative
imports resolved against the module's package. ``from pkg import name`` is an import of the
module ``pkg.name`` when there is one, else of ``pkg`` itself. Importing ``pkg.sub`` also
initialises ``pkg``, but that parent is not counted: a package's ``__init__`` imports its own
submodules by design, and Python has it in ``sys.modules`` before any of them runs. Imports of
modules outside the checked ones (the standard library, numpy, pytest) are ignored."""

import ast
import os

from conftest import LIB, SUBJECT_DIR


def discover(root, package=None):
    """{module name: file} of the package ``package`` found under the ``sys.path`` entry
    ``root`` (its ``__init__`` as ``package``, subpackages included), or of every top-level
    module file directly in ``root`` when ``package`` is None."""
    out = {}
    if package is None:
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if name.endswith(".py") and os.path.isfile(path):
                out[name[:-3]] = path
        return out
    top = os.path.join(root, *package.split("."))
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__"
                             and os.path.isfile(os.path.join(dirpath, d, "__init__.py")))
        rel = os.path.relpath(dirpath, root).replace(os.sep, ".")
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            mod = rel if name == "__init__.py" else "%s.%s" % (rel, name[:-3])
            out[mod] = os.path.join(dirpath, name)
    return out


def imports_of(module, path, known):
    """[(line, imported module)] for every import statement of ``module`` (its file ``path``)
    that names a module of ``known``."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    is_package = os.path.basename(path) == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    found = []

    def add(node, name):
        if name in known and name != module:
            found.append((node.lineno, name))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(node, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                up = node.level - 1
                if up >= len(parts):
                    continue  # beyond the top-level package: Python refuses it too
                base_parts = parts[:len(parts) - up]
                if node.module:
                    base_parts = base_parts + node.module.split(".")
                base = ".".join(base_parts)
            else:
                base = node.module
            for alias in node.names:
                sub = "%s.%s" % (base, alias.name) if base else alias.name
                if alias.name != "*" and sub in known:
                    add(node, sub)
                else:
                    add(node, base)
    return found


def import_graph(modules):
    """{module: {imported module: first line}} over ``modules`` ({name: file})."""
    graph = {}
    for mod, path in modules.items():
        edges = {}
        for line, target in imports_of(mod, path, modules):
            edges.setdefault(target, line)
        graph[mod] = edges
    return graph


def cycles(graph):
    """One cycle (a list of modules, the first repeated at the end) per group of modules that
    import each other (a strongly connected component of more than one module), each starting
    at its smallest name; sorted."""
    index, low, on_stack, stack, groups = {}, {}, set(), [], []
    counter = [0]

    def strongconnect(v):  # Tarjan; the graphs here are a dozen modules deep at most
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(set(group))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)

    out = []
    for group in groups:
        start = min(group)
        # the shortest way back to `start` inside the group (breadth first)
        paths = {start: [start]}
        frontier = [start]
        cycle = None
        while frontier and cycle is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w == start:
                        cycle = paths[v] + [start]
                        break
                    if w in group and w not in paths:
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
                if cycle is not None:
                    break
            frontier = nxt
        out.append(cycle)
    return sorted(out)


def describe_cycle(cycle, graph, modules):
    hops = ["%s (%s:%d)" % (a, os.path.basename(modules[a]), graph[a][b])
            for a, b in zip(cycle, cycle[1:])]
    return " -> ".join(hops + [cycle[-1]])


def checked_modules():
    modules = discover(LIB, "infradev_probe")
    modules.update(discover(SUBJECT_DIR))
    return modules


def test_checked_modules_are_found():
    modules = checked_modules()
    assert {"infradev_probe", "infradev_probe._core", "infradev_probe._api",
            "infradev_probe._ranks", "infradev_probe.plugin", "infradev_wire",
            "infradev_subject"} <= set(modules)


def test_no_import_cycles():
    modules = checked_modules()
    graph = import_graph(modules)
    found = cycles(graph)
    assert not found, "modules that import each other:\n" + "\n".join(
        describe_cycle(c, graph, modules) for c in found)


# ---- the checker on a package of its own ---------------------------------------------------


def write(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


SYNTHETIC = {
    "pkg/__init__.py": "from .a import A\nfrom . import c\n",
    # a -> b only inside a method (resolved relative import)
    "pkg/a.py": "from . import c\n\nclass A:\n    def m(self):\n        from .b import helper\n"
                "        return helper\n",
    # b -> a back through an absolute import, inside a try
    "pkg/b.py": "try:\n    import pkg.a as a_mod\nexcept ImportError:\n    a_mod = None\n\n"
                "def helper():\n    return a_mod\n",
    "pkg/c.py": "import os\nimport json as _json\n",
    # two levels up from a subpackage; a star import of a module
    "pkg/sub/__init__.py": "from .. import c\nfrom ..c import *\n",
    "pkg/sub/d.py": "from . import e\nfrom .e import x\n",
    "pkg/sub/e.py": "x = 1\n",
    # not a package (no __init__.py): not part of pkg
    "pkg/data/loose.py": "import pkg.a\n",
}


def test_the_checker_resolves_imports(tmp_path):
    write(tmp_path, SYNTHETIC)
    modules = discover(str(tmp_path), "pkg")
    assert set(modules) == {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.sub", "pkg.sub.d",
                            "pkg.sub.e"}
    graph = import_graph(modules)
    assert graph == {
        "pkg": {"pkg.a": 1, "pkg.c": 2},
        "pkg.a": {"pkg.c": 1, "pkg.b": 5},
        "pkg.b": {"pkg.a": 2},
        "pkg.c": {},
        "pkg.sub": {"pkg.c": 1},
        "pkg.sub.d": {"pkg.sub.e": 1},
        "pkg.sub.e": {},
    }


def test_the_checker_finds_a_cycle(tmp_path):
    write(tmp_path, SYNTHETIC)
    modules = discover(str(tmp_path), "pkg")
    graph = import_graph(modules)
    found = cycles(graph)
    assert found == [["pkg.a", "pkg.b", "pkg.a"]]
    assert describe_cycle(found[0], graph, modules) == "pkg.a (a.py:5) -> pkg.b (b.py:2) -> pkg.a"
    # A package __init__ importing its submodules, which import their siblings, is no cycle;
    # breaking the import back removes the one there was.
    (tmp_path / "pkg/b.py").write_text("def helper():\n    from . import c\n    return c\n")
    assert cycles(import_graph(discover(str(tmp_path), "pkg"))) == []


def test_the_checker_finds_longer_cycles_and_imports_of_the_package(tmp_path):
    write(tmp_path, {
        "q/__init__.py": "from .x import X\n",
        "q/x.py": "import q.y\nX = 1\n",
        "q/y.py": "from q.z import Z\n",
        "q/z.py": "def f():\n    from q import X\n    return X\n",  # q itself: its __init__
        "q/w.py": "from . import w2\n",
        "q/w2.py": "from .w import *\n",
    })
    found = cycles(import_graph(discover(str(tmp_path), "q")))
    assert found == [["q", "q.x", "q.y", "q.z", "q"], ["q.w", "q.w2", "q.w"]]
