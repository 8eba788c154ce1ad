"""Checks a kvs timeline (tests/test_timeline.sh): python3 timeline_check.py
CHECK FILE [ARGS...]; exits 0 when the check holds, else 1 with the reason.

Checks:
  straggler FILE SLEEP_MS RANKS  a job of RANKS workers whose last rank
      slept SLEEP_MS before each push: the file is a trace whose spans nest
      per thread, whose processes are named, whose events name the keys and
      their bytes, and in which every other rank's wait for the others in
      each round from 2 on accounts for the sleep, the sleeper's does not.
  fault FILE  a job whose last rank was killed: its death, the job's
      failure and the others' errors are instant events.
  dropped FILE  a file whose buffer overflowed says how many events it lost.
  local FILE  a process of the local store alone wrote its own calls.
  hosts FILE0 FILE1  the two hosts' files of a job across 2 hosts on one
      machine: each has its own workers' phases across hosts, and host 1
      measured host 0's clock (the same clock here) within its error.
"""
import json
import statistics
import sys
from collections import defaultdict

EPS = 0.0015                           # the file's microseconds have 3 decimals


def fail(msg):
    print("# " + msg)
    sys.exit(1)


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: not JSON: %s" % (path, e))
    if doc.get("otherData", {}).get("format") != "kvs timeline 1":
        fail("%s: otherData.format is not 'kvs timeline 1'" % path)
    return doc


def nesting(events):
    """Complete events of each (pid, tid) nest: none ends inside another
    that it began after."""
    tracks = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            if e["dur"] < 0:
                fail("negative duration: %s" % e)
            tracks[(e["pid"], e["tid"])].append(e)
    for key, es in tracks.items():
        es.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in es:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - EPS:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + EPS:
                fail("track %s: %s overlaps %s" % (key, e, stack[-1]))
            stack.append(e)
    return tracks


def names(events):
    procs, threads = {}, {}
    for e in events:
        if e["ph"] == "M" and e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        if e["ph"] == "M" and e["name"] == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    return procs, threads


def union_ms(intervals):
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total / 1000.0


def straggler(path, sleep_ms, nranks):
    doc = load(path)
    ev = doc["traceEvents"]
    tracks = nesting(ev)
    procs, threads = names(ev)
    for r in range(nranks):
        if procs.get(r + 1) != "rank %d" % r:
            fail("process %d is named %r, not 'rank %d'" % (r + 1, procs.get(r + 1), r))
    if "kvsd" not in procs.values():
        fail("no process named kvsd: %s" % procs)
    for key in tracks:
        if key not in threads:
            fail("track %s has no name" % (key,))
    keyed = [e for e in ev if e["ph"] == "X" and e.get("args", {}).get("key") == "layer1.weight"]
    if not any(e.get("args", {}).get("bytes") == 4096 for e in keyed):
        fail("no span of key layer1.weight with its 4096 bytes")
    for phase in ("push", "pull", "copy in", "copy out", "waiting for others"):
        if not any(e["name"] == phase for e in ev):
            fail("no %r span" % phase)
    waits = defaultdict(list)          # (rank, round) -> intervals
    for e in ev:
        if e["ph"] == "X" and e["name"] == "waiting for others" and 1 <= e["pid"] <= nranks:
            waits[(e["pid"] - 1, e["args"]["round"])].append((e["ts"], e["ts"] + e["dur"]))
    rounds = sorted({rd for _, rd in waits})
    if rounds[:1] != [1] or len(rounds) < 8:
        fail("rounds with waits: %s, not 1..8" % rounds)
    slow = nranks - 1
    # In every round someone waited for the straggler, and each rank did in
    # most rounds. Not each rank in each round: on a busy machine a rank
    # that is itself held off its core arrives late and waits less.
    for rd in range(2, 9):
        w = [union_ms(waits.get((r, rd), [])) for r in range(slow)]
        if max(w) < 0.5 * sleep_ms:
            fail("in round %d the others waited %s ms, the straggler slept %d ms"
                 % (rd, ", ".join("%.1f" % x for x in w), sleep_ms))
    for r in range(slow):
        w = statistics.median(union_ms(waits.get((r, rd), [])) for rd in range(2, 9))
        if w < 0.5 * sleep_ms:
            fail("rank %d waited %.1f ms a round (median), the straggler slept %d ms"
                 % (r, w, sleep_ms))
    others = [union_ms(waits.get((r, rd), [])) for r in range(slow) for rd in range(2, 9)]
    mine = [union_ms(waits.get((slow, rd), [])) for rd in range(2, 9)]
    if statistics.median(others) > sleep_ms + 40:
        fail("the others' median wait %.1f ms is far above the sleep of %d ms"
             % (statistics.median(others), sleep_ms))
    if statistics.median(mine) > 0.25 * sleep_ms:
        fail("the straggler's own median wait is %.1f ms" % statistics.median(mine))
    print("# others waited %.1f ms per round (median), the straggler %.1f ms; sleep %d ms"
          % (statistics.median(others), statistics.median(mine), sleep_ms))


def fault(path):
    ev = load(path)["traceEvents"]
    nesting(ev)
    inst = [e for e in ev if e["ph"] == "i"]
    if not any(e["name"] == "died" and e["args"].get("rank") == 2 for e in inst):
        fail("no 'died' instant for rank 2: %s" % inst)
    if not any(e["name"] == "job failed" and e["args"].get("error") == "KVS_EPEERDEAD"
               and "rank 2" in e["args"].get("msg", "") for e in inst):
        fail("no 'job failed' instant naming rank 2 with KVS_EPEERDEAD")
    if not any(e["name"] == "error" and e["args"].get("error") == "KVS_EPEERDEAD"
               and e["pid"] in (1, 2) for e in inst):
        fail("no 'error' instant of rank 0 or 1 with KVS_EPEERDEAD")


def dropped(path):
    doc = load(path)
    if not doc["otherData"].get("dropped_events", 0) > 0:
        fail("dropped_events is %s" % doc["otherData"].get("dropped_events"))


def local(path):
    ev = load(path)["traceEvents"]
    nesting(ev)
    calls = {e["name"] for e in ev if e["ph"] == "X"}
    if not {"init", "push", "pull"} <= calls:
        fail("calls in the file: %s" % sorted(calls))


def hosts(path0, path1):
    for host, path in ((0, path0), (1, path1)):
        doc = load(path)
        ev = doc["traceEvents"]
        nesting(ev)
        procs, _ = names(ev)
        want = {"rank %d" % (2 * host), "rank %d" % (2 * host + 1), "kvsd host %d" % host}
        if not want <= set(procs.values()):
            fail("%s: processes %s, not %s" % (path, sorted(procs.values()), sorted(want)))
        if not any(e["name"] == "across hosts" for e in ev):
            fail("%s: no 'across hosts' span" % path)
        off = doc["otherData"]["clock_offsets"][0]
        if off["host"] != host or not off["measured"]:
            fail("%s: clock offsets %s" % (path, off))
        if abs(off["offset_us"]) > off["error_us"] + 1:
            fail("%s: offset %.3f us from host 0's clock, beyond its error %.3f us, on one "
                 "machine" % (path, off["offset_us"], off["error_us"]))


if __name__ == "__main__":
    check, args = sys.argv[1], sys.argv[2:]
    if check == "straggler":
        straggler(args[0], int(args[1]), int(args[2]))
    elif check == "hosts":
        hosts(args[0], args[1])
    else:
        {"fault": fault, "dropped": dropped, "local": local}[check](args[0])
