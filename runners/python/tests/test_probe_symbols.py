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


def test_shadowing_and_non_literal_modules(tmp_path):
    found = symbols(tmp_path, """
        from infradev_probe import subject
        name = "minicache"
        dyn = subject.module(name)

        def test_a(subject):
            subject.module("minicache").X  # a parameter named subject is not the library
            dyn.Y
    """)
    assert found == []
