#!/usr/bin/env python3
"""Check an events.jsonl written by infradev_pytest against expected.json.

usage: check.py EXPECTED_JSON EVENTS_JSONL [PYTEST_EXIT_CODE]

Exits 0 when they agree; otherwise prints every difference and exits 1.
"""
import json
import sys

EVENT_KEYS = {
    "session_start": {"event"},
    "collect_error": {"event", "path", "exc_type", "message"},
    "start": {"event", "nodeid"},
    "result": {"event", "nodeid", "when", "outcome", "exc_type", "message", "duration_s",
               "measurements", "budget"},
    "finish": {"event", "exitstatus"},
}
MESSAGE_LIMIT = 2000


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        expected = json.load(f)
    exit_code = int(argv[3]) if len(argv) == 4 else None
    problems = []

    try:
        with open(argv[2], "rb") as f:
            raw = f.read()
    except OSError as e:
        print("selftest: cannot read events: %s" % e, file=sys.stderr)
        return 1

    events = []
    if raw and not raw.endswith(b"\n"):
        problems.append("events.jsonl does not end with a newline (a torn last line)")
    for number, line in enumerate(raw.decode("utf-8").splitlines(), 1):
        try:
            event = json.loads(line)
        except ValueError as e:
            problems.append("line %d is not JSON (%s): %r" % (number, e, line[:200]))
            continue
        kind = event.get("event") if isinstance(event, dict) else None
        if kind not in EVENT_KEYS:
            problems.append("line %d: unknown event %r" % (number, kind))
            continue
        if set(event) != EVENT_KEYS[kind]:
            problems.append("line %d: %s has keys %s, want %s"
                            % (number, kind, sorted(event), sorted(EVENT_KEYS[kind])))
        message = event.get("message")
        if message is not None:
            if len(message) > MESSAGE_LIMIT:
                problems.append("line %d: message longer than %d chars" % (number, MESSAGE_LIMIT))
            if "Traceback (most recent call last)" in message or '  File "' in message:
                problems.append("line %d: message holds a traceback: %r" % (number, message[:300]))
        events.append((number, event))

    if not events or events[0][1]["event"] != "session_start":
        problems.append("the first event must be session_start")

    # start/result pairing: every start is followed by its result before the next start.
    in_flight = None
    results = {}
    collect_errors = {}
    finishes = []
    for number, event in events:
        kind = event["event"]
        if kind == "start":
            if in_flight is not None:
                problems.append("line %d: start of %s while %s has no result"
                                % (number, event["nodeid"], in_flight))
            in_flight = event["nodeid"]
        elif kind == "result":
            if event["nodeid"] != in_flight:
                problems.append("line %d: result for %s, but the test in flight is %s"
                                % (number, event["nodeid"], in_flight))
            in_flight = None
            if event["nodeid"] in results:
                problems.append("line %d: second result for %s" % (number, event["nodeid"]))
            results[event["nodeid"]] = event
        elif kind == "collect_error":
            if event["path"] in collect_errors:
                problems.append("line %d: second collect_error for %s" % (number, event["path"]))
            collect_errors[event["path"]] = event
        elif kind == "finish":
            finishes.append((number, event))
    if in_flight is not None:
        problems.append("%s started but has no result" % in_flight)

    # finish
    if len(finishes) != 1:
        problems.append("want exactly one finish event, got %d" % len(finishes))
    elif finishes[0][0] != events[-1][0]:
        problems.append("finish is not the last event")
    if finishes:
        status = finishes[-1][1]["exitstatus"]
        if status != expected["exitstatus"]:
            problems.append("finish.exitstatus: want %r, got %r" % (expected["exitstatus"], status))
        if exit_code is not None and status != exit_code:
            problems.append("finish.exitstatus %r differs from pytest's exit code %r" % (status, exit_code))

    # collection errors
    want_ce = expected["collect_errors"]
    for path in sorted(set(want_ce) - set(collect_errors)):
        problems.append("collect_error %s: missing" % path)
    for path in sorted(set(collect_errors) - set(want_ce)):
        problems.append("collect_error %s: unexpected %s" % (path, json.dumps(collect_errors[path])))
    for path in sorted(set(want_ce) & set(collect_errors)):
        want, got = want_ce[path], collect_errors[path]
        if got["exc_type"] != want["exc_type"]:
            problems.append("collect_error %s: exc_type want %r, got %r" % (path, want["exc_type"], got["exc_type"]))
        needle = want.get("message_contains")
        if needle is not None and needle not in (got["message"] or ""):
            problems.append("collect_error %s: message %r lacks %r" % (path, got["message"], needle))

    # results
    want_res = expected["results"]
    for nodeid in sorted(set(want_res) - set(results)):
        problems.append("result %s: missing" % nodeid)
    for nodeid in sorted(set(results) - set(want_res)):
        problems.append("result %s: unexpected %s" % (nodeid, json.dumps(results[nodeid])))
    for nodeid in sorted(set(want_res) & set(results)):
        want, got = want_res[nodeid], results[nodeid]
        for key in ("outcome", "when", "exc_type"):
            if got[key] != want[key]:
                problems.append("result %s: %s want %r, got %r" % (nodeid, key, want[key], got[key]))
        needle = want.get("message_contains")
        if needle is not None and needle not in (got["message"] or ""):
            problems.append("result %s: message %r lacks %r" % (nodeid, got["message"], needle))
        if got["outcome"] == "passed" and (got["exc_type"] is not None or got["message"] is not None):
            problems.append("result %s: passed but has exc_type/message" % nodeid)
        want_kind = want.get("budget_kind")
        budget = got["budget"]
        got_kind = budget.get("kind") if isinstance(budget, dict) else None
        if got_kind != want_kind:
            problems.append("result %s: budget kind want %r, got %r" % (nodeid, want_kind, budget))
        elif budget is not None and not budget["measured"] > budget["limit"]:
            problems.append("result %s: budget measured %r is not over limit %r"
                            % (nodeid, budget["measured"], budget["limit"]))
        want_meas = sorted(want.get("measurements", []))
        if sorted(got["measurements"]) != want_meas:
            problems.append("result %s: measurements want keys %s, got %s"
                            % (nodeid, want_meas, json.dumps(got["measurements"])))
        for key, value in want.get("measured", {}).items():
            if got["measurements"].get(key) != value:
                problems.append("result %s: measurements.%s want %r, got %r"
                                % (nodeid, key, value, got["measurements"].get(key)))
        if budget is not None and budget["measured"] != got["measurements"].get(
                {"memory": "peak_memory_mb", "time": "wall_time_s"}.get(got_kind, ""), budget["measured"]):
            problems.append("result %s: budget.measured %r disagrees with measurements %s"
                            % (nodeid, budget["measured"], json.dumps(got["measurements"])))
        if not isinstance(got["duration_s"], (int, float)) or got["duration_s"] < 0:
            problems.append("result %s: bad duration_s %r" % (nodeid, got["duration_s"]))

    if problems:
        print("selftest: events.jsonl does not match expected.json (%d problems):" % len(problems))
        for p in problems:
            print("  - " + p)
        return 1
    print("selftest: OK: %d results, %d collection errors, exitstatus %s"
          % (len(results), len(collect_errors), finishes[-1][1]["exitstatus"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
