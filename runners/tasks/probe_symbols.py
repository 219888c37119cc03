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

Probes that reach the submission through the probe library (``runners/python/infradev_probe``)
are read the same way: ``m = subject.module("pkg.mod")`` (with ``subject`` from
``from infradev_probe import subject``, or ``infradev_probe.subject``) counts as ``import pkg.mod
as m``, so ``m.Name`` is a ``name``, ``m.Class(...).method`` an ``attribute``, and so on. The
library's own calls pass the symbols through: ``subject.call(f, x=1)``, ``subject.keep(f, x=1)``
and ``batch.call(f, x=1)`` give ``f`` the keyword ``x``; ``subject.getattr(obj, "name")``,
``subject.hasattr``, ``batch.getattr`` / ``batch.setattr`` and ``batch.call_method(obj, "name",
...)`` name the attribute ``name`` of ``obj``.

The module path may be a string constant instead of a literal: ``PS = "pkg.mod"`` assigned in
the file, or in a helper module of the probe directory imported as ``import _helper as H``
(``H.PS``) or ``from _helper import PS``. Rank handles load modules the same way as the subject
(``rank.module(PS)``, ``group[r].module("pkg.mod")``): any ``<expr>.module(path)`` whose path
names an upstream module counts as an import, whatever the receiver.

Names the probe defines itself shadow upstream ones from that point of the file on; the
analysis is deliberately simple (one pass per scope, no data flow across functions beyond
module-level imports), and errs on the side of listing a name.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys

# The probe library and its entry point.
PROBE_LIBRARY = "infradev_probe"
# Library calls whose first argument is an upstream callable (its keywords are the callable's).
FORWARDING_CALLS = {"call", "keep"}
# Library calls whose second argument names an attribute of the first.
ATTRIBUTE_CALLS = {"getattr", "hasattr", "setattr", "call_method"}


def string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` assignments (the last one wins)."""
    out: dict[str, str] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and \
                isinstance(stmt.value.value, str):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = stmt.value.value
    return out


class Collector(ast.NodeVisitor):
    def __init__(self, packages: list[str], file: str) -> None:
        self.packages = packages
        self.file = file
        self.symbols: list[dict] = []
        # local name -> "module" | "object" (an imported class/function) ; per scope stack
        self.scopes: list[dict[str, str]] = [{}]
        # String constants by name, and those of the probe directory's helper modules by the
        # local name they are imported as.
        self.strings: dict[str, str] = {}
        self.helper_strings: dict[str, dict[str, str]] = {}

    def helper_constants(self, module: str) -> dict[str, str]:
        """The string constants of a helper module beside this file (``_pp`` -> ``_pp.py``)."""
        if "." in module:
            return {}
        path = os.path.join(os.path.dirname(self.file), module + ".py")
        try:
            with open(path, encoding="utf-8") as f:
                return string_constants(ast.parse(f.read(), filename=path))
        except (OSError, SyntaxError, ValueError):
            return {}

    def string_of(self, node: ast.AST) -> str | None:
        """The text of a literal, of a string constant, or of a helper module's constant."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and self.lookup(node.id) is None:
            return self.strings.get(node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return self.helper_strings.get(node.value.id, {}).get(node.attr)
        return None

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
        """``module``, ``object`` (an upstream name), ``instance``, ``member``, the library's
        ``library`` / ``subject`` / ``batch``, or None."""
        if isinstance(node, ast.Name):
            k = self.lookup(node.id)
            return None if k == "local" else k
        if isinstance(node, ast.Call):
            return self.value_kind(node)
        if isinstance(node, ast.Attribute):
            base = self.kind_of(node.value)
            if base == "library":
                return "subject" if node.attr == "subject" else None
            if base == "module":
                return "object"
            if base in ("object", "instance"):
                return "member"
        return None

    # -- imports -----------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == PROBE_LIBRARY:
                self.bind(alias.asname or alias.name, "library")
                continue
            if self.upstream(alias.name):
                self.emit(node, alias.name, "module")
                local = alias.asname or alias.name.split(".")[0]
                self.bind(local, "module")
            else:
                constants = self.helper_constants(alias.name)
                if constants:
                    self.helper_strings[alias.asname or alias.name] = constants

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if not node.level and node.module == PROBE_LIBRARY:
            for alias in node.names:
                self.bind(alias.asname or alias.name, "subject" if alias.name == "subject" else None)
            return
        if node.level or not self.upstream(node.module):
            constants = {} if node.level else self.helper_constants(node.module or "")
            for alias in node.names:
                self.bind(alias.asname or alias.name, None)
                if alias.name in constants:
                    self.strings[alias.asname or alias.name] = constants[alias.name]
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

    def library_call(self, node: ast.Call) -> str | None:
        """The method name of a call on ``subject`` or on a batch (``subject.module``...)."""
        func = node.func
        if isinstance(func, ast.Attribute) and self.kind_of(func.value) in ("subject", "batch"):
            return func.attr
        return None

    def remote_module(self, node: ast.Call) -> str | None:
        """``pkg.mod`` for ``<subject, rank or any handle>.module(path)`` whose path (a literal
        or a string constant) names an upstream module."""
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr == "module") or not node.args:
            return None
        if self.kind_of(func.value) in ("module", "object", "instance", "member"):
            return None  # an upstream object's own `module` attribute
        path = self.string_of(node.args[0])
        return path if path is not None and self.upstream(path) else None

    def visit_library_call(self, node: ast.Call, method: str) -> None:
        module = self.remote_module(node)
        if module is not None:
            self.emit(node, module, "module")
        target = self.kind_of(node.args[0]) if node.args else None
        if method in FORWARDING_CALLS and target is not None:
            for kw in node.keywords:
                if kw.arg is not None:
                    self.emit(kw, kw.arg, "keyword")
        if method in ATTRIBUTE_CALLS and target is not None and len(node.args) > 1:
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                self.emit(name, name.value, "attribute")
                if method == "call_method":
                    for kw in node.keywords:
                        if kw.arg is not None:
                            self.emit(kw, kw.arg, "keyword")

    def visit_Call(self, node: ast.Call) -> None:
        method = self.library_call(node)
        if method is not None:
            self.visit_library_call(node, method)
            self.generic_visit(node)
            return
        module = self.remote_module(node)
        if module is not None:  # a rank handle's (or another receiver's) module(...)
            self.emit(node, module, "module")
            self.generic_visit(node)
            return
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
            if isinstance(target, ast.Name):
                text = self.string_of(node.value)
                if text is None:
                    self.strings.pop(target.id, None)
                else:
                    self.strings[target.id] = text

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
            if self.remote_module(value):
                return "module"
            method = self.library_call(value)
            if method == "batch":
                return "batch"
            if method in FORWARDING_CALLS and value.args:
                first = value.args[0]
                name = first.attr if isinstance(first, ast.Attribute) else getattr(first, "id", "")
                if self.kind_of(first) in ("object", "member") and name[:1].isupper():
                    return "instance"
                return None
            if method is not None:
                return None
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
