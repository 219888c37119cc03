"""runners/tasks/mutate.py: mutants and variants of the reference change only, stable ids,
each operator the infra faults call for, and variants that really keep the behaviour."""

import ast
import json
import os
import subprocess
import sys
import textwrap

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))), "tasks", "mutate.py")

SOURCE = textwrap.dedent('''\
    import torch
    import torch.distributed as dist


    def untouched(a, b):
        return a < b


    def step(x, counts, rank, eps=1e-6):
        total = 0
        for k in range(3):
            if k >= 2:
                break
            total += 1
        if rank == 0:
            dist.all_reduce(x)
        reqs = dist.batch_isend_irecv([x])
        y = x.add(1)
        z = torch.clamp(y, min=0)
        w = z / (z.sum() + eps)
        order = sorted(counts, reverse=True)
        first = order.pop()
        keep = list(counts)
        h = w.to(torch.float32)
        return total, h, first, keep, order, reqs


    def pure(a, b):
        s = a + b
        d = a * 2
        if s > d:
            r = s - d
        else:
            r = d - s
        return r
''')


def run(source=SOURCE, changed=None, path="pkg/mod.py"):
    lines = source.count("\n") + 1
    request = {"files": [{"path": path, "source": source,
                          "changed": changed if changed is not None else [[1, lines]]}]}
    out = subprocess.run([sys.executable, SCRIPT], input=json.dumps(request),
                         capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    assert data["errors"] == []
    return data["mutants"]


def ops(found, kind="mutant"):
    return {(m["operator"], m["original"], m["replacement"]) for m in found if m["kind"] == kind}


def test_every_infra_operator_fires_where_it_applies():
    found = ops(run())
    for want in [
        ("compare_boundary", "k >= 2", "(k > 2)"),
        ("compare_boundary", "rank == 0", "(rank != 0)"),
        ("rank_guard_removed", "rank == 0", "True"),
        ("off_by_one", "2", "3"),
        ("flag_for_counter", "total += 1", "total = 1"),
        ("in_place", "x.add(1)", "x.add_(1)"),
        ("clamp_removed", "torch.clamp(y, min=0)", "y"),
        ("eps_removed", "z.sum() + eps", "z.sum()"),
        ("reversed_order", "sorted(counts, reverse=True)", "sorted(counts, reverse=False)"),
        ("reversed_order", "order.pop()", "order.pop(0)"),
        ("loop_control", "break", "continue"),
        ("copy_removed", "list(counts)", "counts"),
        ("dtype_device", "torch.float32", "torch.float16"),
        ("collective_duplicated", "dist.all_reduce(x)", "dist.all_reduce(x) dist.all_reduce(x)"),
        ("collective_duplicated", "reqs = dist.batch_isend_irecv([x])",
         "reqs = dist.batch_isend_irecv([x]) reqs = dist.batch_isend_irecv([x])"),
        ("p2p_ops_doubled", "dist.batch_isend_irecv([x])",
         "dist.batch_isend_irecv(list([x]) * 2)"),
        ("statement_dropped", "dist.all_reduce(x)", "pass"),
        ("guard_dropped", "if rank == 0: dist.all_reduce(x)", "dist.all_reduce(x)"),
    ]:
        assert want in found, f"{want} not among {sorted(found)}"


def test_only_the_changed_lines_are_mutated():
    lines = SOURCE.splitlines()
    start = lines.index("def pure(a, b):") + 1
    found = run(changed=[[start, len(lines)]])
    assert found
    assert all(m["line"] >= start for m in found)
    assert not any("untouched" in m["original"] or m["line"] < start for m in found)
    assert run(changed=[]) == []


def test_ids_are_stable_unique_and_sources_differ_only_at_the_site():
    first, second = run(), run()
    assert first == second
    ids = [m["id"] for m in first]
    assert len(ids) == len(set(ids)) and all(len(i) == 12 for i in ids)
    original_lines = SOURCE.splitlines()
    for m in first:
        ast.parse(m["source"])
        assert m["source"] != SOURCE
        if m["operator"] == "helper_extracted":
            continue  # appends a helper at the end
        changed = [i for i, (a, b) in enumerate(zip(original_lines, m["source"].splitlines()))
                   if a != b]
        assert changed and changed[0] + 1 >= m["line"] - 1, m


def _call(source, name, *args):
    scope = {}
    exec(compile(source, "variant", "exec"), scope)
    return scope[name](*args)


def test_variants_keep_the_behaviour():
    source = SOURCE.split("def pure")[0].replace("import torch\nimport torch.distributed as dist\n",
                                                 "") + "def pure" + SOURCE.split("def pure")[1]
    variants = [m for m in run(source) if m["kind"] == "variant"]
    kinds = {m["operator"] for m in variants}
    assert {"local_renamed", "statements_reordered", "helper_extracted", "branches_swapped",
            "equal_expression"} <= kinds, kinds
    for m in variants:
        if "def pure" not in m["source"]:
            continue
        for a, b in [(1, 2), (5, 1), (3, 3), (-4, 7)]:
            assert _call(m["source"], "pure", a, b) == _call(source, "pure", a, b), m
    first = source.splitlines().index("def pure(a, b):") + 1
    mutants = [m for m in run(source) if m["kind"] == "mutant" and m["line"] > first]
    differs = sum(any(_safe(m["source"], a, b) != _call(source, "pure", a, b)
                      for a, b in [(1, 2), (5, 1), (3, 3), (-4, 7)]) for m in mutants)
    assert differs >= len(mutants) // 2  # mutants really change what the code does


def _safe(source, a, b):
    try:
        return _call(source, "pure", a, b)
    except Exception as e:  # a mutant may raise
        return type(e).__name__


def test_unparseable_input_is_reported_not_crashed():
    request = {"files": [{"path": "bad.py", "source": "def f(:\n", "changed": [[1, 1]]}]}
    out = subprocess.run([sys.executable, SCRIPT], input=json.dumps(request),
                         capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    assert data["mutants"] == [] and data["errors"] and data["errors"][0].startswith("bad.py:1")


def test_a_local_a_nested_lambda_also_takes_as_parameter_is_not_renamed():
    source = textwrap.dedent('''\
        def balance(parts, weights):
            out = [[x + 1 for x in part] for part in parts]
            out.sort(key=lambda x: (weights[x[0]], x))
            total = len(out)
            return out, total
    ''')
    renamed = {m["original"] for m in run(source=source) if m["operator"] == "local_renamed"}
    assert "x" not in renamed, renamed
    assert {"out", "part", "total"} <= renamed, renamed


def test_process_group_creation_counts_as_a_collective():
    source = textwrap.dedent('''\
        import torch.distributed as dist


        def build(layouts):
            for ranks in layouts:
                group, _ = dist.new_subgroups_by_enumeration(ranks, backend="gloo")
                dist.new_group(ranks)
    ''')
    doubled = {m["original"] for m in run(source=source)
               if m["operator"] == "collective_duplicated"}
    assert doubled == {
        'group, _ = dist.new_subgroups_by_enumeration(ranks, backend="gloo")',
        "dist.new_group(ranks)",
    }, doubled
