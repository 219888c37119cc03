"""Mutants and behaviour-preserving variants of a task's reference change (``infradev tasks power``).

Reads one JSON request on stdin::

    {"files": [{"path": "pkg/mod.py", "source": "<the reference's text>",
                "changed": [[first_line, last_line], ...]}]}

``changed`` holds the reference-side line ranges of the hunks the upstream change touched
(``git diff -U0 base reference``); only code that starts on one of those lines is mutated.
Prints one JSON object::

    {"mutants": [{"id", "kind", "operator", "path", "line", "col", "original",
                  "replacement", "source", "bytecode_equal"}, ...],
     "errors": ["pkg/mod.py: ...", ...]}

``kind`` is ``mutant`` (a plausible fault: the probes must reject it) or ``variant`` (a
refactoring that keeps the behaviour: the probes must accept it). ``source`` is the whole file
with the one change applied by splicing the source text (comments and layout elsewhere stay
byte for byte). ``id`` is stable: the first 12 hex digits of SHA-256 over kind, operator,
location and replacement, so the same reference always yields the same ids. ``bytecode_equal``
is true when the mutant compiles to the same code objects as the reference (trivially
equivalent; the classic "trivial compiler equivalence" check).

Standard library only (``ast``), deterministic, runs on the host with Debian's python3; it
never imports or executes the code it reads.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
import sys

# Methods of tensors with an in-place twin (``x.add(y)`` / ``x.add_(y)``).
INPLACE_METHODS = {
    "add", "sub", "mul", "div", "clamp", "clamp_min", "clamp_max", "copy", "zero", "fill",
    "masked_fill", "index_fill", "scatter", "scatter_add", "index_add", "exp", "log", "neg",
    "abs", "sqrt", "pow", "div", "floor", "ceil", "round", "sigmoid", "tanh", "relu", "t",
    "transpose", "unsqueeze", "squeeze", "mul", "lerp", "addcmul", "addcdiv", "masked_scatter",
}
COLLECTIVES = {
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "reduce", "barrier", "all_to_all",
    "all_to_all_single", "send", "recv", "isend", "irecv", "gather", "scatter",
    "batch_isend_irecv", "all_gather_object", "broadcast_object_list", "gather_object",
    "scatter_object_list", "send_object_list", "recv_object_list",
    # Group creation is collective: every rank of the default group takes part (a store
    # round-trip per group, and a connection set-up per rank pair of the group on gloo).
    "new_group", "new_subgroups", "new_subgroups_by_enumeration",
}
DTYPE_SWAPS = {
    "float32": "float16", "float16": "float32", "bfloat16": "float16", "float64": "float32",
    "float": "half", "half": "float", "int64": "int32", "int32": "int64", "long": "int",
    "int": "long", "bool": "uint8", "uint8": "bool",
}
DEVICE_SWAPS = {"cuda": "cpu", "cpu": "cuda"}
COMPARE_SWAPS = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
    ast.In: ast.NotIn, ast.NotIn: ast.In,
}
COMPARE_MIRROR = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE,
                  ast.Eq: ast.Eq, ast.NotEq: ast.NotEq}
# ``popleft()`` -> ``pop()``, ``pop()`` -> ``pop(0)``, ``appendleft(x)`` -> ``append(x)``,
# ``append(x)`` -> ``insert(0, x)``: valid on lists and deques alike.
ORDER_METHODS = {"popleft", "pop", "appendleft", "append"}
MODULES = {"torch", "math", "np", "numpy", "F"}
COPY_CALLS = {"list", "tuple", "dict", "set", "sorted"}
COPY_METHODS = {"copy", "clone", "detach"}
CLAMP_CALLS = {"clamp", "clamp_min", "clamp_max", "clip", "floor", "ceil", "maximum", "minimum"}
ATOMIC = (ast.Name, ast.Constant, ast.Attribute, ast.Subscript, ast.Call, ast.List, ast.Tuple,
          ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)


class Candidate:
    """One change: replace ``node`` (an expression or a statement) by ``new`` (a node, a list of
    statements, or raw text)."""

    def __init__(self, kind, operator, node, new, extra_source="", label=None):
        self.kind = kind
        self.operator = operator
        self.node = node
        self.new = new
        self.extra_source = extra_source
        # (location node, original, replacement) shown instead of the spliced text.
        self.label = label


def _name_of(func):
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _mentions(node, word):
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and word in sub.id.lower():
            return True
        if isinstance(sub, ast.Attribute) and word in sub.attr.lower():
            return True
    return False


def _call(name, args):
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=args, keywords=[])


def _int_constant(node):
    return (isinstance(node, ast.Constant) and type(node.value) is int)


def _is_docstring(stmt, parent_body):
    return (parent_body and stmt is parent_body[0] and isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str))


def _names(node, ctx):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}


def _pure(expr):
    """No calls except obviously pure builtins, no await/yield/walrus."""
    for n in ast.walk(expr):
        if isinstance(n, (ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr, ast.Lambda)):
            return False
        if isinstance(n, ast.Call):
            if not (isinstance(n.func, ast.Name) and n.func.id in {"len", "range", "int", "min",
                                                                    "max", "abs", "tuple"}):
                return False
    return True


# -- mutation operators: plausible faults ---------------------------------------------------


def expression_mutants(node, in_loop):
    """Faults on one expression node."""
    out = []
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        swap = COMPARE_SWAPS.get(type(node.ops[0]))
        if swap is not None:
            new = copy.deepcopy(node)
            new.ops = [swap()]
            out.append(("compare_boundary", new))
        if _mentions(node, "rank"):
            out.append(("rank_guard_removed", ast.Constant(True)))
    if isinstance(node, ast.Call) and _name_of(node.func) == "batch_isend_irecv" and \
            len(node.args) == 1 and not node.keywords:
        # Every point-to-point op of one batch listed twice: each send and its matching receive
        # are posted twice in the same batch, so gloo pairs them up (twice the bytes) where a
        # second batch_isend_irecv call of the same ops would deadlock instead.
        new = copy.deepcopy(node)
        new.args = [ast.BinOp(_call("list", [copy.deepcopy(node.args[0])]), ast.Mult(),
                              ast.Constant(2))]
        out.append(("p2p_ops_doubled", new))
    if isinstance(node, ast.BinOp):
        flips = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.FloorDiv: ast.Div}
        if type(node.op) in flips:
            new = copy.deepcopy(node)
            new.op = flips[type(node.op)]()
            out.append(("arithmetic", new))
        for side in ("left", "right"):
            operand = getattr(node, side)
            if _mentions(operand, "eps") and isinstance(node.op, (ast.Add, ast.Sub)):
                other = node.right if side == "left" else node.left
                out.append(("eps_removed", copy.deepcopy(other)))
    if _int_constant(node) and not isinstance(node.value, bool):
        for delta in (1, -1):
            out.append(("off_by_one", ast.Constant(node.value + delta)))
    if isinstance(node, ast.BoolOp):
        new = copy.deepcopy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        out.append(("bool_operator", new))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        out.append(("negation_removed", copy.deepcopy(node.operand)))
    if isinstance(node, ast.Call):
        name = _name_of(node.func)
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        if len(positional) >= 2 and len(positional) == len(node.args) and \
                ast.dump(node.args[0]) != ast.dump(node.args[1]):
            new = copy.deepcopy(node)
            new.args[0], new.args[1] = new.args[1], new.args[0]
            out.append(("swapped_arguments", new))
        if isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr.endswith("_") and attr[:-1] in INPLACE_METHODS:
                new = copy.deepcopy(node)
                new.func.attr = attr[:-1]
                out.append(("out_of_place", new))
            elif attr in INPLACE_METHODS:
                new = copy.deepcopy(node)
                new.func.attr = attr + "_"
                out.append(("in_place", new))
            reordered = _reordered(node)
            if reordered is not None:
                out.append(("reversed_order", reordered))
            if attr in COPY_METHODS and not node.args:
                out.append(("copy_removed", copy.deepcopy(node.func.value)))
        if name in ("min", "max") and isinstance(node.func, ast.Name):
            new = copy.deepcopy(node)
            new.func.id = "max" if name == "min" else "min"
            out.append(("reversed_order", new))
        if name in ("reversed", "sorted") and len(node.args) == 1 and not node.keywords:
            out.append(("reversed_order", _call("list", [copy.deepcopy(node.args[0])])
                        if name == "reversed" else copy.deepcopy(node.args[0])))
        if name in COPY_CALLS and isinstance(node.func, ast.Name) and len(node.args) == 1 \
                and not node.keywords and not isinstance(node.args[0], (ast.GeneratorExp,
                                                                         ast.ListComp)):
            out.append(("copy_removed", copy.deepcopy(node.args[0])))
        if name in CLAMP_CALLS and (node.args or isinstance(node.func, ast.Attribute)):
            func = node.func
            if isinstance(func, ast.Attribute) and not (
                    isinstance(func.value, ast.Name) and func.value.id in MODULES):
                out.append(("clamp_removed", copy.deepcopy(func.value)))  # x.clamp(...)
            elif node.args:
                out.append(("clamp_removed", copy.deepcopy(node.args[0])))  # torch.clamp(x)
        if name in ("min", "max") and isinstance(node.func, ast.Name) and len(node.args) == 2:
            out.append(("clamp_removed", copy.deepcopy(node.args[0])))
        for i, kw in enumerate(node.keywords):
            if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, bool):
                new = copy.deepcopy(node)
                new.keywords[i].value = ast.Constant(not kw.value.value)
                op = "reversed_order" if kw.arg in ("reverse", "last", "descending", "largest") \
                    else "flag_flipped"
                out.append((op, new))
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
            node.value.id == "torch" and node.attr in DTYPE_SWAPS:
        new = copy.deepcopy(node)
        new.attr = DTYPE_SWAPS[node.attr]
        out.append(("dtype_device", new))
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        for dev, other in DEVICE_SWAPS.items():
            if node.value == dev or node.value.startswith(dev + ":"):
                out.append(("dtype_device", ast.Constant(other)))
    if in_loop and isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        pass  # copies inside loops are added at statement level (see statement_mutants)
    return out


def statement_mutants(stmt, parent_body, in_loop):
    """Faults on one statement."""
    out = []
    if _is_docstring(stmt, parent_body):
        return out
    simple = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete, ast.Raise,
              ast.Return)
    if isinstance(stmt, simple) and not (isinstance(stmt, ast.AnnAssign) and stmt.value is None):
        if len(parent_body) > 1 or not isinstance(stmt, ast.Return):
            out.append(("statement_dropped", [ast.Pass()]))
    # A collective posted twice: a call statement, or one whose result is assigned
    # (`reqs = batch_isend_irecv(ops)`: the second posting's handles replace the first's).
    if isinstance(stmt, (ast.Expr, ast.Assign)) and isinstance(stmt.value, ast.Call):
        name = _name_of(stmt.value.func)
        if name in COLLECTIVES:
            out.append(("collective_duplicated", [stmt, copy.deepcopy(stmt)]))
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, (ast.Add, ast.Sub)):
        out.append(("flag_for_counter", [ast.Assign(targets=[copy.deepcopy(stmt.target)],
                                                    value=copy.deepcopy(stmt.value))]))
        target = copy.deepcopy(stmt.target)
        _set_load(target)
        if not isinstance(stmt.value, ast.Constant):  # a number: `x = x + 1` is the same
            out.append(("in_place", [ast.Assign(targets=[copy.deepcopy(stmt.target)],
                                                value=ast.BinOp(target, stmt.op,
                                                                copy.deepcopy(stmt.value)))]))
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and \
            isinstance(stmt.value, ast.BinOp) and isinstance(stmt.value.op, ast.Add) and \
            ast.dump(_loaded(stmt.targets[0])) == ast.dump(stmt.value.left):
        out.append(("in_place", [ast.AugAssign(target=copy.deepcopy(stmt.targets[0]),
                                               op=ast.Add(),
                                               value=copy.deepcopy(stmt.value.right))]))
    if isinstance(stmt, ast.If):
        out.append(("guard_dropped", copy.deepcopy(stmt.body)))
        new = copy.deepcopy(stmt)
        new.test = ast.UnaryOp(ast.Not(), new.test)
        out.append(("guard_negated", [new]))
        if _mentions(stmt.test, "rank"):
            out.append(("rank_guard_removed", copy.deepcopy(stmt.body)))
    if isinstance(stmt, ast.While):
        new = copy.deepcopy(stmt)
        new.test = ast.UnaryOp(ast.Not(), new.test)
        out.append(("guard_negated", [new]))
    if isinstance(stmt, ast.Break):
        out.append(("loop_control", [ast.Continue()]))
    if isinstance(stmt, ast.Continue):
        out.append(("loop_control", [ast.Break()]))
    if isinstance(stmt, ast.Return) and in_loop:
        out.append(("loop_control", [ast.Break()]))
    if isinstance(stmt, (ast.For, ast.AsyncFor)) and isinstance(stmt.iter, ast.Name):
        # A copy of the iterated collection on every pass (list(...) inside the loop body).
        new = copy.deepcopy(stmt)
        copy_stmt = ast.Assign(targets=[ast.Name(id=stmt.iter.id, ctx=ast.Store())],
                               value=_call("list", [ast.Name(id=stmt.iter.id, ctx=ast.Load())]))
        new.body = [copy_stmt] + new.body
        out.append(("copy_in_loop", [new]))
    return out


def _reordered(node):
    """The same container call at the other end (see ORDER_METHODS), or None."""
    attr = node.func.attr
    new = copy.deepcopy(node)
    if attr == "popleft" and not node.args:
        new.func.attr = "pop"
    elif attr == "pop" and not node.args and not node.keywords:
        new.args = [ast.Constant(0)]
    elif attr == "appendleft" and len(node.args) == 1:
        new.func.attr = "append"
    elif attr == "append" and len(node.args) == 1 and not node.keywords:
        new.func.attr = "insert"
        new.args = [ast.Constant(0)] + new.args
    else:
        return None
    return new


def _loaded(target):
    t = copy.deepcopy(target)
    _set_load(t)
    return t


def _set_load(node):
    for n in ast.walk(node):
        if hasattr(n, "ctx"):
            n.ctx = ast.Load()


# -- behaviour-preserving variants ----------------------------------------------------------


def expression_variants(node):
    out = []
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and \
            type(node.ops[0]) in COMPARE_MIRROR and _pure(node):
        new = ast.Compare(left=copy.deepcopy(node.comparators[0]),
                          ops=[COMPARE_MIRROR[type(node.ops[0])]()],
                          comparators=[copy.deepcopy(node.left)])
        out.append(("equal_expression", new))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id == "range" and len(node.args) == 1 and not node.keywords:
        out.append(("equal_expression", _call("range", [ast.Constant(0),
                                                        copy.deepcopy(node.args[0])])))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and \
            _int_constant(node.right) and node.right.value == 2 and \
            isinstance(node.left, ast.Name):
        out.append(("equal_expression", ast.BinOp(copy.deepcopy(node.left), ast.Add(),
                                                  copy.deepcopy(node.left))))
    return out


def statement_variants(stmt, parent_body, index):
    out = []
    if isinstance(stmt, ast.If) and stmt.orelse and not (
            len(stmt.orelse) == 1 and isinstance(stmt.orelse[0], ast.If)):
        new = ast.If(test=ast.UnaryOp(ast.Not(), copy.deepcopy(stmt.test)),
                     body=copy.deepcopy(stmt.orelse), orelse=copy.deepcopy(stmt.body))
        out.append(("branches_swapped", [new]))
    if index + 1 < len(parent_body):
        nxt = parent_body[index + 1]
        if _independent(stmt, nxt):
            out.append(("statements_reordered", (stmt, nxt)))
    return out


def _assign_parts(stmt):
    if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
        return {t.id for t in stmt.targets}, stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
        return {stmt.target.id}, stmt.value
    return None


def _independent(a, b):
    pa, pb = _assign_parts(a), _assign_parts(b)
    if pa is None or pb is None:
        return False
    (wa, va), (wb, vb) = pa, pb
    if not (_pure(va) and _pure(vb)):
        return False
    ra, rb = _names(va, ast.Load), _names(vb, ast.Load)
    return not (wa & (rb | wb)) and not (wb & ra)


def function_variants(func, changed):
    """Rename each local of a function touched by the change; extract one changed expression
    into a module-level helper."""
    out = []
    params = {a.arg for a in func.args.args + func.args.kwonlyargs + func.args.posonlyargs}
    if func.args.vararg:
        params.add(func.args.vararg.arg)
    if func.args.kwarg:
        params.add(func.args.kwarg.arg)
    declared = set()
    for n in ast.walk(func):
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            declared.update(n.names)
    all_names = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)} | params
    # Names a nested lambda or function takes as parameters: renaming every Name of the local
    # would rename their uses in the nested body but not the parameter (an ast.arg), which
    # changes what they refer to (`lambda x: key[x]` beside a local `x`). Not renamed.
    nested_params = set()
    for n in ast.walk(func):
        if n is not func and isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)):
            a = n.args
            nested_params.update(p.arg for p in a.args + a.kwonlyargs + a.posonlyargs)
            nested_params.update(p.arg for p in (a.vararg, a.kwarg) if p is not None)
    stores = []
    for n in ast.walk(func):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.lineno in changed \
                and n.id not in params and n.id not in declared and n.id != "_" \
                and n.id not in nested_params:
            if n.id not in [s.id for s in stores]:
                stores.append(n)
    for store in stores:
        new_name = store.id + "_renamed"
        if new_name in all_names:
            continue
        sites = [n for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == store.id]
        out.append(Candidate("variant", "local_renamed", sites, new_name,
                             label=(store, store.id, new_name)))
    return out


def extract_helper_variants(tree, changed, source_lines):
    """Moves one changed expression of a method into a module-level helper called with its
    free names (``def _extracted_<line>_<col>(a, b): return <expr>``)."""
    out = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for stmt in ast.walk(func):
            if not isinstance(stmt, (ast.Assign, ast.Return)) or stmt.value is None:
                continue
            expr = stmt.value
            if expr.lineno not in changed or not isinstance(expr, (ast.BinOp, ast.Call,
                                                                   ast.Compare)):
                continue
            if any(isinstance(n, (ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr,
                                  ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp,
                                  ast.DictComp))
                   for n in ast.walk(expr)):
                continue
            if any(isinstance(n, ast.Name) and n.id == "super" for n in ast.walk(expr)):
                continue
            free = sorted(_names(expr, ast.Load) - _module_names(tree))
            helper = f"_extracted_{expr.lineno}_{expr.col_offset}"
            header = f"def {helper}({', '.join(free)}):\n    return {ast.unparse(expr)}\n"
            call = _call(helper, [ast.Name(id=n, ctx=ast.Load()) for n in free])
            out.append(Candidate("variant", "helper_extracted", expr, call,
                                 extra_source="\n\n" + header))
    return out


def _module_names(tree):
    names = set(dir(__builtins__)) if not isinstance(__builtins__, dict) else set(__builtins__)
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for a in stmt.names:
                names.add((a.asname or a.name).split(".")[0])
        elif isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                names |= _names(t, ast.Store)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            names.add(stmt.target.id)
    return names


def inline_helper_variants(tree, changed):
    """Inlines a call of a module-level function whose body is one ``return <expr>`` when every
    argument is a name or a constant (no argument evaluated twice or not at all)."""
    out = []
    simple_funcs = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and not stmt.decorator_list and \
                not stmt.args.vararg and not stmt.args.kwarg and not stmt.args.kwonlyargs:
            body = [s for s in stmt.body if not _is_docstring(s, stmt.body)]
            if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value:
                simple_funcs[stmt.name] = (stmt, body[0].value)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in simple_funcs and node.lineno in changed):
            continue
        func, expr = simple_funcs[node.func.id]
        params = [a.arg for a in func.args.args]
        if node.keywords or len(node.args) != len(params) or not all(
                isinstance(a, (ast.Name, ast.Constant)) for a in node.args):
            continue
        mapping = dict(zip(params, node.args))
        new = copy.deepcopy(expr)

        class Sub(ast.NodeTransformer):
            def visit_Name(self, n):
                if n.id in mapping:
                    return copy.deepcopy(mapping[n.id])
                return n

        new = Sub().visit(new)
        out.append(Candidate("variant", "helper_inlined", node, new))
    return out


# -- driver ---------------------------------------------------------------------------------


def walk_with_context(tree):
    """Yields (statement, parent_body, index, in_loop) for every statement."""
    stack = [(tree.body, False)]
    while stack:
        body, in_loop = stack.pop()
        for i, stmt in enumerate(body):
            yield stmt, body, i, in_loop
            loop = in_loop or isinstance(stmt, (ast.For, ast.While, ast.AsyncFor))
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                loop = False
            for field in ("body", "orelse", "finalbody"):
                sub = getattr(stmt, field, None)
                if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
                    stack.append((sub, loop))
            for handler in getattr(stmt, "handlers", []) or []:
                stack.append((handler.body, loop))


def own_expressions(stmt):
    """The expression nodes of a statement, not those of nested statements."""
    out = []
    todo = [c for c in ast.iter_child_nodes(stmt) if not isinstance(c, ast.stmt)]
    while todo:
        n = todo.pop()
        if isinstance(n, ast.expr):
            out.append(n)
        todo.extend(c for c in ast.iter_child_nodes(n) if not isinstance(c, ast.stmt))
    return out


def candidates(tree, changed, source_lines):
    out = []
    for stmt, body, index, in_loop in walk_with_context(tree):
        if stmt.lineno in changed:
            for op, new in statement_mutants(stmt, body, in_loop):
                out.append(Candidate("mutant", op, stmt, new))
            for op, new in statement_variants(stmt, body, index):
                if op == "statements_reordered":
                    a, b = new
                    out.append(Candidate("variant", op, (a, b), None))
                else:
                    out.append(Candidate("variant", op, stmt, new))
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.extend(function_variants(stmt, changed))
        for expr in own_expressions(stmt):
            if expr.lineno not in changed or _in_target(expr, stmt):
                continue
            for op, new in expression_mutants(expr, in_loop):
                out.append(Candidate("mutant", op, expr, new))
            for op, new in expression_variants(expr):
                out.append(Candidate("variant", op, expr, new))
    out.extend(extract_helper_variants(tree, changed, source_lines))
    out.extend(inline_helper_variants(tree, changed))
    return out


def _in_target(expr, stmt):
    """True for expressions that are assignment targets or parts of them (Store context)."""
    ctx = getattr(expr, "ctx", None)
    if isinstance(ctx, (ast.Store, ast.Del)):
        return True
    for field in ("targets", "target"):
        t = getattr(stmt, field, None)
        targets = t if isinstance(t, list) else [t] if t is not None else []
        for target in targets:
            if isinstance(target, ast.Name):
                continue
            for n in ast.walk(target):
                if n is expr and not isinstance(target, (ast.Subscript, ast.Attribute)):
                    return True
                if n is expr and isinstance(target, (ast.Subscript, ast.Attribute)) and \
                        (n is target):
                    return True
    if isinstance(stmt, ast.AugAssign) and expr is stmt.target:
        return True
    return False


class Text:
    """The source as lines, with offsets from (line, col) pairs (col in UTF-8 bytes, as ast)."""

    def __init__(self, source):
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line, col_bytes):
        text = self.lines[line - 1]
        col = len(text.encode("utf-8")[:col_bytes].decode("utf-8", errors="replace"))
        return self.starts[line - 1] + col

    def span(self, node):
        return (self.offset(node.lineno, node.col_offset),
                self.offset(node.end_lineno, node.end_col_offset))

    def indent(self, node):
        line = self.lines[node.lineno - 1]
        return line[:len(line) - len(line.lstrip())]


def render(cand, text):
    """(start, end, replacement text, location node) of a candidate."""
    if cand.operator == "local_renamed":
        # Every occurrence of the name, spliced one by one (comments and layout stay).
        spans = sorted(text.span(n) for n in cand.node)
        start, end = spans[0][0], spans[-1][1]
        pieces, at = [], start
        for a, b in spans:
            pieces.append(text.source[at:a])
            pieces.append(cand.new)
            at = b
        pieces.append(text.source[at:end])
        return start, end, "".join(pieces), cand.node[0]
    if cand.operator == "statements_reordered":
        a, b = cand.node
        start, end = text.offset(a.lineno, a.col_offset), text.span(b)[1]
        first = text.source[start:text.span(a)[1]]
        second = text.source[text.offset(b.lineno, b.col_offset):end]
        if "\n" in first or "\n" in second:
            return None
        return start, end, second + "\n" + text.indent(a) + first, a
    node = cand.node
    start, end = text.span(node)
    if isinstance(node, ast.stmt):
        stmts = cand.new
        rendered = ast.unparse(ast.fix_missing_locations(ast.Module(body=stmts,
                                                                    type_ignores=[])))
        indent = text.indent(node)
        lines = rendered.split("\n")
        rendered = lines[0] + "".join("\n" + indent + line for line in lines[1:])
        return start, end, rendered, node
    rendered = ast.unparse(ast.fix_missing_locations(ast.Expression(body=cand.new)))
    if not isinstance(cand.new, ATOMIC) or (isinstance(cand.new, ast.Constant)
                                            and isinstance(cand.new.value, (int, float))
                                            and cand.new.value < 0):
        rendered = f"({rendered})"
    return start, end, rendered, node


def _code_equal(a, b):
    if a.co_code != b.co_code or a.co_names != b.co_names or \
            len(a.co_consts) != len(b.co_consts):
        return False
    for x, y in zip(a.co_consts, b.co_consts):
        if hasattr(x, "co_code") and hasattr(y, "co_code"):
            if not _code_equal(x, y):
                return False
        elif hasattr(x, "co_code") or hasattr(y, "co_code") or type(x) is not type(y) or x != y:
            return False
    return True


def _compile(source, path):
    return compile(source, path, "exec", dont_inherit=True, optimize=0)


def mutants_of(path, source, changed_ranges):
    changed = set()
    for first, last in changed_ranges:
        changed.update(range(first, last + 1))
    tree = ast.parse(source, filename=path)
    reference_dump = ast.dump(tree)
    reference_code = _compile(source, path)
    text = Text(source)
    seen = set()
    out = []
    for cand in candidates(tree, changed, text.lines):
        rendered = render(cand, text)
        if rendered is None:
            continue
        start, end, replacement, node = rendered
        original = source[start:end]
        if replacement == original:
            continue
        shown = (node, original, replacement) if cand.label is None else cand.label
        new_source = source[:start] + replacement + source[end:] + cand.extra_source
        try:
            new_tree = ast.parse(new_source, filename=path)
            code = _compile(new_source, path)
        except (SyntaxError, ValueError):
            continue
        dump = ast.dump(new_tree)
        if dump == reference_dump or dump in seen:
            continue
        seen.add(dump)
        node, original, replacement = shown
        location = f"{path}:{node.lineno}:{node.col_offset}"
        digest = hashlib.sha256(
            "\0".join([cand.kind, cand.operator, location, replacement]).encode()).hexdigest()
        out.append({
            "id": digest[:12],
            "kind": cand.kind,
            "operator": cand.operator,
            "path": path,
            "line": node.lineno,
            "col": node.col_offset,
            "original": _one_line(original),
            "replacement": _one_line(replacement),
            "source": new_source,
            "bytecode_equal": _code_equal(code, reference_code),
        })
    out.sort(key=lambda m: (m["kind"], m["path"], m["line"], m["col"], m["operator"], m["id"]))
    return out


def _one_line(text, limit=160):
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def main():
    request = json.load(sys.stdin)
    result = {"mutants": [], "errors": []}
    for f in request.get("files", []):
        try:
            result["mutants"].extend(mutants_of(f["path"], f["source"], f.get("changed", [])))
        except SyntaxError as e:
            result["errors"].append(f"{f['path']}:{e.lineno}: cannot parse: {e.msg}")
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
