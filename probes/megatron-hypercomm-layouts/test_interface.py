"""Structural probe: HyperCommGrid's view-aware methods take the parameters the prompt names,
with their defaults, and accept them by keyword."""
# INFRADEV-PROBE-CANARY-7c3e91d04b25

from infradev_probe import subject

hcg = subject.module("megatron.core.hyper_comm_grid")


def _param(sig, name):
    assert name in sig.parameters, f"no parameter {name!r}"
    return sig.parameters[name]


def test_public_interface():
    """Requirement: HyperCommGrid.register_view(name, shape, dim_names, shared_dims=None)
    (returns None); create_pg(dims, ..., view=None, **kwargs), get_pg(dims, view=None) and
    get_rank_enum(dims, view=None), with `view` accepted by keyword; the constructor keeps
    (shape, dim_names, rank_offset=0, backend=None).

    The official tests pass `view` by keyword to some of these only and never look at the
    defaults."""
    subject.module("os").environ["WORLD_SIZE"] = "16"
    cls = hcg.HyperCommGrid
    sig = subject.signature(cls.register_view)
    assert list(sig.parameters)[1:] == ["name", "shape", "dim_names", "shared_dims"]
    assert sig.parameters["shared_dims"].default is None
    for meth in (cls.create_pg, cls.get_pg, cls.get_rank_enum):
        sig = subject.signature(meth)
        assert list(sig.parameters)[1] == "dims"
        view = _param(sig, "view")
        assert view.default is None
        assert view.kind in (view.KEYWORD_ONLY, view.POSITIONAL_OR_KEYWORD)
    assert any(p.kind == p.VAR_KEYWORD for p in subject.signature(cls.create_pg).parameters.values())
    sig = subject.signature(cls)
    assert list(sig.parameters)[:4] == ["shape", "dim_names", "rank_offset", "backend"]
    assert sig.parameters["rank_offset"].default == 0
    assert sig.parameters["backend"].default is None

    grid = cls(shape=[2, 4], dim_names=["tp", "dp"], rank_offset=4)
    assert grid.register_view(name="ep", shape=[8], dim_names=["ep"], shared_dims=None) is None
    assert grid.register_view("none", [4, 2], ["a", "b"]) is None
    assert sorted(map(sorted, grid.get_rank_enum(dims="ep", view="ep"))) == [list(range(4, 12))]
    assert sorted(map(sorted, grid.get_rank_enum(["a"], view="none"))) == [
        [4, 5, 6, 7], [8, 9, 10, 11]]
    assert sorted(map(sorted, grid.get_rank_enum("dp", view=None))) == [
        [4, 6, 8, 10], [5, 7, 9, 11]]
