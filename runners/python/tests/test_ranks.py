"""Rank groups in the judge library (``subject.ranks``) against a socketpair, with the test
playing the broker; and the subject server's rank welcome. The real broker and sandboxes are
tested in tests/rank_groups.rs."""

import pytest

from conftest import wire
from test_judge import FUNC, MOD, OBJ, broker, ref  # noqa: F401 (fixture)
from test_subject import mod

from infradev_probe import (
    RankGroup,
    StaleHandle,
    SubjectCrashed,
    SubjectError,
    SubjectTimeout,
    subject,
)
from infradev_probe import _core


def start_group(p, world=2, group=7):
    msg = p.read()
    assert msg == {"op": "ranks", "id": msg["id"], "world_size": world}
    p.send({"id": msg["id"], "group": group, "world_size": world})
    return msg


def rank_call(p, rank, op=None):
    msg = p.read()
    assert msg["op"] == "call" and msg["rank"] == rank, msg
    if op is not None:
        assert msg["req"]["op"] == op, msg
    return msg["id"], msg["req"]


def rank_ok(p, rank, value, op=None, group=7):
    n, req = rank_call(p, rank, op)
    p.send({"id": n, "ok": value, "subject_ns": 10 + rank, "group": group})
    return req


def stop_group(p):
    msg = p.read()
    assert msg == {"op": "ranks", "id": msg["id"], "world_size": 0}, msg
    p.send({"id": msg["id"], "group": None})


def test_call_all_sends_one_request_per_rank_at_once(broker):
    def script(p):
        start_group(p)
        # each rank imports the module into its own handle table
        assert rank_ok(p, 0, ref(3, MOD), "import") == {"op": "import", "module": "ringx"}
        rank_ok(p, 0, ref(4, FUNC), "getattr")
        rank_ok(p, 1, ref(5, MOD), "import")
        rank_ok(p, 1, ref(6, FUNC), "getattr")
        msg = p.read()
        assert msg["op"] == "call_ranks"
        assert msg["reqs"] == [
            {"op": "call", "obj": {"$ref": 4}, "args": [10], "kwargs": {"$dict": []}},
            {"op": "call", "obj": {"$ref": 6}, "args": [20], "kwargs": {"$dict": [["x", 1]]}},
        ]
        p.send({"id": msg["id"], "group": 7, "ranks": [
            {"ok": 1, "subject_ns": 100}, {"ok": ref(9, OBJ), "subject_ns": 200}]})
        stop_group(p)

    broker(script)
    with subject.ranks(2) as group:
        assert len(group) == 2 and group.alive
        out = group.call_all("ringx", "exchange", [(10,), (20,)], [{}, {"x": 1}])
        assert out[0] == 1
        assert isinstance(out[1], _core.Handle) and out[1]._infradev_c.rank == 1
        assert group.last_subject_ns == [100, 200]
    assert not group.alive
    with pytest.raises(StaleHandle):
        out[1].anything


def test_the_lowest_ranks_error_is_raised_after_every_reply(broker):
    def script(p):
        start_group(p, world=3)
        for r in range(3):
            rank_ok(p, r, ref(3, MOD), "import")
            rank_ok(p, r, ref(4, FUNC), "getattr")
        msg = p.read()
        p.send({"id": msg["id"], "group": 7, "ranks": [
            {"ok": 1, "subject_ns": 1},
            {"err": {"builtin": "KeyError", "classes": []}, "subject_ns": 1},
            {"err": {"builtin": "ValueError", "classes": []}, "subject_ns": 1}]})
        stop_group(p)

    broker(script)
    with subject.ranks(3) as group:
        with pytest.raises(KeyError) as caught:
            group.call_same("ringx", "f")
        assert isinstance(caught.value, SubjectError)
        assert group.alive  # an exception raised in a rank is no fault


def test_a_rank_fault_ends_the_group_not_the_subject(broker):
    def script(p):
        start_group(p)
        rank_ok(p, 1, ref(3, OBJ), "put")
        for r in range(2):
            rank_ok(p, r, ref(3, MOD), "import")
            rank_ok(p, r, ref(4, FUNC), "getattr")
        msg = p.read()
        p.send({"id": msg["id"], "group": 7, "fault": "crashed", "rank": 1})
        # the ordinary subject is still the same generation
        assert p.ok(5, "put") == {"op": "put", "value": 5}
        # a second group, then a timeout
        start_group(p, group=8)
        n, _ = rank_call(p, 0, "put")
        p.send({"id": n, "group": 8, "fault": "timeout", "rank": 0})

    broker(script)
    gen = subject.generation
    group = subject.ranks(2).start()
    h = group[1].put("x")
    with pytest.raises(SubjectCrashed) as caught:
        group.call_same("ringx", "die")
    assert caught.value.rank == 1
    assert not isinstance(caught.value, Exception)
    assert not group.alive
    with pytest.raises(StaleHandle):
        h.anything
    assert dir(h) == []  # what a failure report lists, without raising over the crash
    with pytest.raises(StaleHandle):
        group[0]
    group.stop()  # nothing to stop: no frame
    assert subject.put(5) == 5
    assert subject.generation == gen
    second = subject.ranks(2).start()
    with pytest.raises(SubjectTimeout) as caught:
        second[0].put(1)
    assert caught.value.rank == 0


def test_handles_stay_with_their_rank(broker):
    def script(p):
        start_group(p)
        rank_ok(p, 1, ref(3, OBJ), "put")
        p.ok(ref(3, OBJ), "put")
        stop_group(p)

    broker(script)
    with subject.ranks(2) as group:
        one = group[1].put([1])
        with pytest.raises(StaleHandle):
            group[0].fetch(one)
        mine = subject.put([2])
        with pytest.raises(StaleHandle):
            group[1].call(mine)
        with pytest.raises(StaleHandle):
            subject.fetch(one)
        with pytest.raises(TypeError):
            group[0].put(lambda: 1)  # no judge callbacks inside a collective


def test_world_sizes_are_checked_before_anything_is_sent():
    for bad in (0, 1, 5, "2", 2.0):
        with pytest.raises(ValueError):
            RankGroup(bad)


def test_a_late_rank_reply_is_drained_without_touching_the_subjects_handles(broker):
    def script(p):
        start_group(p)
        n, _ = rank_call(p, 0, "put")
        p.send({"id": n, "group": 7, "ok": ref(9, OBJ), "subject_ns": 1})
        # the judge's next call drained that reply first and released nothing
        assert p.ok(1, "put") == {"op": "put", "value": 1}
        n, _ = rank_call(p, 1, "put")
        p.send({"id": n, "group": 7, "fault": "crashed", "rank": 1})
        assert p.ok(2, "put") == {"op": "put", "value": 2}

    broker(script)
    group = subject.ranks(2).start()
    c = _core.current_client()

    def abandon(rank):
        """A rank call the judge left before its reply came (as an interrupt would)."""
        n = c.next_id
        c.next_id += 1
        c._send(wire.pack({"op": "call", "id": n, "rank": rank,
                           "req": {"op": "put", "value": 1}}))
        c.stack.append(n)

    abandon(0)
    assert subject.put(1) == 1
    assert c.stack == [] and c.releases == {}
    assert group.alive
    abandon(1)
    assert subject.put(2) == 2
    assert not group.alive  # the drained fault ended the group


# ---- the subject server's side --------------------------------------------------------------


def test_a_rank_is_told_where_it_stands_before_the_repository_loads(start_subject):
    s = start_subject(welcome=False)
    s.send({"op": "welcome", "generation": 3, "env": {
        "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.2",
        "MASTER_PORT": "29500"}})
    osmod = mod(s, "os")
    environ = s.ref({"op": "getattr", "obj": {"$ref": osmod}, "name": "environ"})
    got = s.ok({"op": "call_method", "obj": {"$ref": environ}, "name": "get",
                "args": ["MASTER_ADDR"], "kwargs": {"$dict": []}})
    assert got == "10.0.0.2"


@pytest.mark.parametrize("env", [
    {"PYTHONPATH": "/evil"},           # only the rank variables
    {"RANK": 1},                       # strings only
    ["RANK"],
])
def test_a_bad_rank_welcome_is_refused(start_subject, env):
    s = start_subject(welcome=False)
    s.send({"op": "welcome", "generation": 3, "env": env})
    assert s.proc.wait(timeout=10) == 2
    assert s.reader.read() is None



def test_rank_replies_have_exact_shapes(broker):
    def script(p):
        start_group(p)
        n, _ = rank_call(p, 0, "import")
        p.send({"id": n, "ok": ref(3, MOD), "subject_ns": 1, "group": 7, "callback": {}})
        for r in range(2):
            rank_ok(p, r, ref(3 + r, MOD), "import")
            rank_ok(p, r, ref(5 + r, FUNC), "getattr")
        msg = p.read()
        p.send({"id": msg["id"], "group": 7, "ranks": [
            {"ok": 1, "subject_ns": 1}, {"ok": 2, "subject_ns": 1, "err": None}]})
        stop_group(p)

    broker(script)
    with subject.ranks(2) as group:
        with pytest.raises(wire.ProtocolError):
            group[0].module("ringx").f
        with pytest.raises(wire.ProtocolError):
            group.call_same("ringx", "f")
