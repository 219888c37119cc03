"""runners/tasks/probe_symbols.py: the upstream symbols a probe uses, from its syntax tree,
for the import forms and for the probe library's ``subject.module(...)`` forms."""

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))), "tasks", "probe_symbols.py")


def symbols(tmp_path, source, packages=("minicache",)):
    path = tmp_path / "test_probe.py"
    path.write_text(textwrap.dedent(source))
    args = [sys.executable, SCRIPT]
    for p in packages:
        args += ["--package", p]
    out = subprocess.run(args + [str(path)], capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    assert data["errors"] == []
    for s in data["symbols"]:
        assert set(s) == {"file", "line", "symbol", "kind"} and s["file"] == str(path)
    return [(s["kind"], s["symbol"]) for s in data["symbols"]]


def test_import_forms_still_count(tmp_path):
    found = symbols(tmp_path, """
        from minicache import BlockAllocator
        import minicache.block_allocator as ba

        def test_a():
            alloc = BlockAllocator(num_blocks=4)
            alloc.allocate(seq_id=1, token_ids=[1])
            ba.hash_block(None, [1])
    """)
    assert found == [
        ("module", "minicache"), ("name", "BlockAllocator"),
        ("module", "minicache.block_allocator"),
        ("keyword", "num_blocks"),
        ("keyword", "seq_id"), ("keyword", "token_ids"), ("attribute", "allocate"),
        ("name", "hash_block"),
    ]


def test_subject_module_counts_as_an_import(tmp_path):
    found = symbols(tmp_path, """
        import pytest
        from infradev_probe import subject

        minicache = subject.module("minicache")
        block_allocator = subject.module("minicache.block_allocator")
        os_ = subject.module("os")

        def test_a():
            alloc = minicache.BlockAllocator(num_blocks=4)
            alloc.allocate(seq_id=1, token_ids=[1])
            with pytest.raises(minicache.NoFreeBlocksError):
                alloc.defragment()
            block_allocator.hash_block(None, [1])
            os_.getcwd()
            subject.module("minicache").Other
    """)
    assert found == [
        ("module", "minicache"),
        ("module", "minicache.block_allocator"),
        ("keyword", "num_blocks"), ("name", "BlockAllocator"),
        ("keyword", "seq_id"), ("keyword", "token_ids"), ("attribute", "allocate"),
        ("name", "NoFreeBlocksError"),
        ("attribute", "defragment"),
        ("name", "hash_block"),
        ("name", "Other"), ("module", "minicache"),
    ]


def test_library_calls_pass_symbols_through(tmp_path):
    found = symbols(tmp_path, """
        import infradev_probe as ip
        from infradev_probe import subject as s

        mc = ip.subject.module("minicache")

        def test_a():
            alloc = s.keep(mc.BlockAllocator, 8)
            alloc.free(0)
            s.call(alloc.get_block_table, seq_id=1)
            s.getattr(alloc, "num_cached_tokens")
            with s.batch() as b:
                b.call(alloc.append_tokens, seq_id=1, token_ids=[2])
                b.call_method(alloc, "ref_count", block_id=0)
            s.put([1, 2])  # not upstream: nothing
            s.getattr([], "append")  # not upstream: nothing
    """)
    assert found == [
        ("module", "minicache"),
        ("name", "BlockAllocator"),
        ("attribute", "free"),
        ("keyword", "seq_id"), ("attribute", "get_block_table"),
        ("attribute", "num_cached_tokens"),
        ("keyword", "seq_id"), ("keyword", "token_ids"), ("attribute", "append_tokens"),
        ("attribute", "ref_count"), ("keyword", "block_id"),
    ]


def test_module_paths_through_constants_helpers_and_rank_handles(tmp_path):
    (tmp_path / "_helper.py").write_text('BA = "minicache.block_allocator"\nOTHER = 3\n')
    found = symbols(tmp_path, """
        from infradev_probe import subject
        import _helper as H
        from _helper import BA as ALLOC
        name = "minicache"
        dyn = subject.module(name)

        def test_a(group):
            dyn.Y
            H_mod = subject.module(H.BA)
            H_mod.hash_block(seed=1)
            group[1].module(ALLOC).BlockAllocator
            for rank in group:
                rank.module("minicache").NoFreeBlocksError
    """)
    assert sorted(found) == sorted([
        ("module", "minicache"), ("name", "Y"),
        ("module", "minicache.block_allocator"), ("name", "hash_block"), ("keyword", "seed"),
        ("module", "minicache.block_allocator"), ("name", "BlockAllocator"),
        ("module", "minicache"), ("name", "NoFreeBlocksError"),
    ]), found


def test_shadowing_and_paths_lint_cannot_read(tmp_path):
    found = symbols(tmp_path, """
        from infradev_probe import subject
        import minicache
        name = "mini" + "cache"
        dyn = subject.module(name)
        other = subject.module(".".join(["minicache", "x"]))

        def test_a():
            dyn.Y
            other.Z
            minicache.module("minicache").W  # an upstream object's own attribute
            subject = object()
    """)
    assert found == [("module", "minicache"), ("name", "module")], found
