"""List the upstream symbols a task's probes use, from their syntax tree (never by importing them).

Used by ``infradev tasks lint``: every symbol printed here must be named in the task's prompt.md,
so that an agent is told every interface the hidden probes call.

    python3 probe_symbols.py --package verl [--package ...] probe.py [probe.py ...]

prints one JSON object: ``{"symbols": [{"file", "line", "symbol", "kind"}, ...], "errors": [...]}``.

What counts as an upstream symbol:

* ``module``: a module of an upstream package that is imported (``verl.utils.groupwise``);
* ``name``: a name imported from an upstream module (``from verl.utils import group_mean_std``)
  or reached as an attribute of an upstream module alias (``core_algos.compute_gae``);
* ``attribute``: an attribute of an upstream object: of a name imported from upstream (a class
  attribute or method), or of a variable assigned from a call of an upstream *class* (a
  capitalised name), such as ``mgr.prepare_store``;
* ``keyword``: a keyword argument passed to an upstream callable or method.

Names the probe defines itself shadow upstream ones from that point of the file on; the
analysis is deliberately simple (one pass per scope, no data flow across functions beyond
module-level imports), and errs on the side of listing a name.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys


class Collector(ast.NodeVisitor):
    def __init__(self, packages: list[str], file: str) -> None:
        self.packages = packages
        self.file = file
        self.symbols: list[dict] = []
        # local name -> "module" | "object" (an imported class/function) ; per scope stack
        self.scopes: list[dict[str, str]] = [{}]

    # -- helpers -----------------------------------------------------------------------------
    def upstream(self, module: str | None) -> bool:
        return bool(module) and any(
            module == p or module.startswith(p + ".") for p in self.packages
        )

    def emit(self, node: ast.AST, symbol: str, kind: str) -> None:
        self.symbols.append(
            {"file": self.file, "line": getattr(node, "lineno", 0), "symbol": symbol, "kind": kind}
        )

    def lookup(self, name: str) -> str | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def bind(self, name: str, kind: str | None) -> None:
        if kind is None:
            self.scopes[-1].pop(name, None)
            # A local name shadows an outer upstream one.
            if any(name in s for s in self.scopes[:-1]):
                self.scopes[-1][name] = "local"
        else:
            self.scopes[-1][name] = kind

    def kind_of(self, node: ast.AST) -> str | None:
        """``module``, ``object`` (an upstream name), ``instance``, or None."""
        if isinstance(node, ast.Name):
            k = self.lookup(node.id)
            return None if k == "local" else k
        if isinstance(node, ast.Call):
            return self.value_kind(node)
        if isinstance(node, ast.Attribute):
            base = self.kind_of(node.value)
            if base == "module":
                return "object"
            if base in ("object", "instance"):
                return "member"
        return None

    # -- imports -----------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if self.upstream(alias.name):
                self.emit(node, alias.name, "module")
                local = alias.asname or alias.name.split(".")[0]
                self.bind(local, "module")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not self.upstream(node.module):
            for alias in node.names:
                self.bind(alias.asname or alias.name, None)
            return
        self.emit(node, node.module, "module")
        for alias in node.names:
            if alias.name == "*":
                continue
            self.emit(node, alias.name, "name")
            # A submodule imported by name is a module; anything else an object.
            self.bind(alias.asname or alias.name, "object")

    # -- uses --------------------------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        base = self.kind_of(node.value)
        if base == "module":
            self.emit(node, node.attr, "name")
        elif base in ("object", "instance", "member"):
            self.emit(node, node.attr, "attribute")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        callee = self.kind_of(node.func)
        if callee is not None:
            for kw in node.keywords:
                if kw.arg is not None:
                    self.emit(kw, kw.arg, "keyword")
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        kind = self.value_kind(node.value)
        for target in node.targets:
            self.assign(target, kind)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self.assign(node.target, self.value_kind(node.value) if node.value else None)

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self.assign(item.optional_vars, self.value_kind(item.context_expr))
        for stmt in node.body:
            self.visit(stmt)

    def value_kind(self, value: ast.AST) -> str | None:
        """An upstream class called here makes an instance; other values are untracked."""
        if isinstance(value, ast.Call):
            callee = value.func
            name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
            if self.kind_of(callee) in ("object", "member") and name[:1].isupper():
                return "instance"
        if isinstance(value, (ast.Name, ast.Attribute)):
            kind = self.kind_of(value)
            return "object" if kind == "member" else kind
        return None

    def assign(self, target: ast.AST, kind: str | None) -> None:
        if isinstance(target, ast.Name):
            self.bind(target.id, kind)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self.assign(elt, None)
        else:
            self.visit(target)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(default)
        params = [a.arg for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs]
        self.bind(node.name, None)
        self.scopes.append({})
        for p in params:
            self.bind(p, None)
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for b in node.bases:
            self.visit(b)
        self.bind(node.name, None)
        self.scopes.append({})
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()


def collect(path: str, packages: list[str]) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    c = Collector(packages, path)
    c.visit(tree)
    return c.symbols


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", action="append", default=[], required=True)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    symbols: list[dict] = []
    errors: list[str] = []
    for path in args.files:
        try:
            symbols.extend(collect(path, args.package))
        except SyntaxError as e:
            errors.append(f"{path}:{e.lineno}: syntax error: {e.msg}")
        except OSError as e:
            errors.append(f"{path}: {e}")
    json.dump({"symbols": symbols, "errors": errors}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
