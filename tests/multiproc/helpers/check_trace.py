#!/usr/bin/python3
"""Checks the COLLIE_TRACE files of test_trace_proc.cpp's job, then tools/collie-trace's merge of them.

    check_trace.py PREFIX NRANKS COLLIE_TRACE_TOOL [--cut RANK]

The job (every rank, in order): AllReduce float32 x 8 (sum), Broadcast float32 x 16384 from rank 1, AllGather
int32 x 4, a group of Send to rank+1 and Recv from rank-1 (int64 x 32), an async AllReduce int64 x 4 (max), then
two iterations of a GradientReducer over 3 float32 parameters. With --cut RANK the job made the first three calls
only, and that rank's file was cut short by a SIGTERM (no closing bracket): it must still load and hold them. Prints what is wrong
and exits 1, or exits 0.
"""
import json
import os
import shutil
import subprocess
import sys

prefix, nranks, tool = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cut = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[4] == "--cut" else -1
problems = []


def check(cond, what):
    if not cond:
        problems.append(what)
    return cond


def load(path, closed):
    text = open(path).read()
    check(text.startswith("[\n{"), f"{path}: does not start a JSON array")
    if closed:
        check(text.rstrip().endswith("]"), f"{path}: the array is not closed after destroy")
        return json.loads(text)
    check(not text.rstrip().endswith("]"), f"{path}: closed, yet the process was killed before destroy")
    return json.loads(text.rstrip().rstrip(",") + "\n]")


CALLS = [("AllReduce", "float32", 8 * 4), ("Broadcast", "float32", 16384 * 4), ("AllGather", "int32", 4 * 4)]
files = {}
for r in range(nranks):
    events = load(f"{prefix}.rank{r}.trace.json", closed=(r != cut))
    files[r] = events
    meta = [e for e in events if e["ph"] == "M"]
    pname = [e for e in meta if e["name"] == "process_name"]
    check(len(pname) == 1 and pname[0]["pid"] == r and pname[0]["args"]["rank"] == r
          and pname[0]["args"]["nranks"] == nranks and pname[0]["args"]["base_us"] > 1.6e15,
          f"rank {r}: process_name metadata wrong: {pname}")
    check(all(e["pid"] == r for e in events), f"rank {r}: an event with another pid")
    threads = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    calls = sorted((e for e in events if e.get("cat") == "call"), key=lambda e: e["args"]["call"])
    waits = [e for e in events if e.get("cat") == "wait"]
    ddp = [e for e in events if e.get("cat") == "ddp"]
    check(threads.get(0) == "calls", f"rank {r}: thread 0 is not named calls: {threads}")
    seqs = [c["args"]["call"] for c in calls]
    check(seqs == list(range(len(seqs))), f"rank {r}: call numbers not 0..n-1 in order: {seqs}")
    for c in calls:
        check(c["ph"] == "X" and c["dur"] >= 0 and c["tid"] == 0 and c["args"]["ok"] is True,
              f"rank {r}: bad call event {c}")
        check(c["args"]["algorithm"] in ("ring", "direct", "tree", "rhd") and c["args"]["transport"] != "",
              f"rank {r}: call without algorithm/transport {c}")
    names = [(c["name"], c["args"]["dtype"], c["args"]["bytes"]) for c in calls]
    check(names[:3] == CALLS, f"rank {r}: first calls {names[:3]}, expected {CALLS}")
    if cut >= 0:
        continue  # the job stopped after these (one rank killed, the others done)
    p2p = sorted((c["name"], c["args"]["peer"]) for c in calls[3:5])
    check(p2p == [("Recv", (r - 1) % nranks), ("Send", (r + 1) % nranks)], f"rank {r}: the group's calls {p2p}")
    check(calls[5]["name"] == "AllReduce" and calls[5]["args"]["op"] == "max" and calls[5]["args"]["dtype"] == "int64",
          f"rank {r}: the async call {calls[5]}")
    check(len(calls) >= 6 + 2, f"rank {r}: no DDP AllReduces after the async call ({len(calls)} calls)")
    check(calls[1]["args"]["root"] == 1, f"rank {r}: the broadcast's root {calls[1]['args']}")
    # Per-step waits: each inside its call, on a thread named after its peer, for a call of this rank.
    by_seq = {c["args"]["call"]: c for c in calls}
    for w in waits:
        peer, recv = w["args"]["peer"], w["name"].startswith("recv from")
        c = by_seq.get(w["args"]["call"])
        if not check(c is not None, f"rank {r}: a wait for no call: {w}"):
            continue
        check(w["name"] == ("recv from %d" if recv else "send to %d") % peer and peer != r,
              f"rank {r}: wait name/peer wrong: {w}")
        check(threads.get(w["tid"]) == ("recv from rank %d" if recv else "send to rank %d") % peer,
              f"rank {r}: wait on thread {threads.get(w['tid'])}: {w}")
        check(w["args"]["coll"] == c["name"], f"rank {r}: wait's collective {w['args']['coll']} vs {c['name']}")
        check(c["ts"] - 1 <= w["ts"] and w["ts"] + w["dur"] <= c["ts"] + c["dur"] + 1,
              f"rank {r}: wait {w['ts']}+{w['dur']} outside its call {c['ts']}+{c['dur']}")
    recv_peers = {w["args"]["peer"] for w in waits if w["name"].startswith("recv") and w["args"]["call"] == 1}
    check((recv_peers == set()) if r == 1 else bool(recv_peers),
          f"rank {r}: broadcast from rank 1 received from {recv_peers}")
    check(any(w["args"]["call"] == 3 and w["name"] == "send to %d" % ((r + 1) % nranks) for w in waits)
          or any(w["args"]["call"] == 4 and w["name"] == "send to %d" % ((r + 1) % nranks) for w in waits),
          f"rank {r}: no send wait on rank {(r + 1) % nranks} in the group")
    # DDP: per bucket and iteration, a "ready" span then a "reduce" span on its own thread.
    for b in {e["args"]["bucket"] for e in ddp}:
        spans = sorted((e for e in ddp if e["args"]["bucket"] == b), key=lambda e: e["ts"])
        check([e["name"] for e in spans] == ["ready", "reduce"] * 2, f"rank {r}: bucket {b} spans {spans}")
        check(threads.get(spans[0]["tid"]) == f"ddp bucket {b}", f"rank {r}: bucket {b} thread name")
        check(all(a["ts"] + a["dur"] <= z["ts"] + 0.01 for a, z in zip(spans, spans[1:])),
              f"rank {r}: bucket {b} spans overlap: {spans}")
    check(len({e["args"]["bucket"] for e in ddp}) >= 2, f"rank {r}: fewer than 2 DDP buckets traced: {ddp}")

# Every receive wait has the matching send wait on the peer, in the same call.
for r in range(nranks):
    if r == cut:
        continue
    for w in (e for e in files[r] if e.get("cat") == "wait" and e["name"].startswith("recv from")):
        p = w["args"]["peer"]
        if p == cut:
            continue
        # Collectives have one number on every rank; a Recv is matched by the peer's Send (numbered by its group).
        same = (lambda e: e["args"]["coll"] == "Send") if w["args"]["coll"] == "Recv" else \
            (lambda e: e["args"]["call"] == w["args"]["call"])
        check(any(e.get("cat") == "wait" and e["name"] == f"send to {r}" and same(e) for e in files[p]),
              f"rank {r} waited on rank {p} in call #{w['args']['call']}, which sent nothing")

# The merge: one process track per rank, events ordered, every event kept.
out = prefix + ".merged.json"
res = subprocess.run(["/usr/bin/python3", tool, prefix, "-o", out], capture_output=True, text=True)
check(res.returncode == 0, f"collie-trace failed ({res.returncode}): {res.stdout}{res.stderr}")
if res.returncode == 0:
    merged = json.load(open(out))["traceEvents"]
    check(len(merged) == sum(len(v) for v in files.values()), "the merge lost or added events")
    pnames = {e["pid"]: e["args"]["name"] for e in merged if e["ph"] == "M" and e["name"] == "process_name"}
    check(pnames == {r: f"rank {r}" for r in range(nranks)}, f"merged process tracks: {pnames}")
    for r in range(nranks):
        ts = [e["ts"] for e in merged if e["pid"] == r and e["ph"] != "M"]
        check(ts == sorted(ts) and ts, f"rank {r}: merged events not in time order")
    # The clock merge, event by event: merged ts == the file's ts + its base_us - the earliest base_us.
    bases = {r: next(e for e in files[r] if e.get("name") == "process_name")["args"]["base_us"] for r in files}
    low = min(bases.values())
    for r in files:
        want = sorted(e["ts"] + (bases[r] - low) for e in files[r] if e["ph"] != "M")
        got = sorted(e["ts"] for e in merged if e["pid"] == r and e["ph"] != "M")
        check(len(want) == len(got) and all(abs(a - b) < 0.01 for a, b in zip(want, got)),
              f"rank {r}: merged ts are not the file's ts + base_us - min(base_us)")
    # Causality on that clock: a receive wait in a collective ends after the peer's send to this rank started.
    sends = {}
    for e in merged:
        if e.get("cat") == "wait" and e["name"].startswith("send to ") and e["args"]["coll"] not in ("Send", "Recv"):
            key = (e["pid"], int(e["name"][8:]), e["args"]["call"])
            sends[key] = min(sends.get(key, e["ts"]), e["ts"])
    pairs = 0
    for w in merged:
        if w.get("cat") != "wait" or not w["name"].startswith("recv from ") or w["args"]["coll"] in ("Send", "Recv"):
            continue
        start = sends.get((w["args"]["peer"], w["pid"], w["args"]["call"]))
        if start is not None:
            pairs += 1
            check(w["ts"] + w["dur"] + 50 >= start,
                  f"rank {w['pid']}: receive from {w['args']['peer']} in call #{w['args']['call']} ends at "
                  f"{w['ts'] + w['dur']:.1f} us, before the peer's send started ({start:.1f} us)")
    check(pairs > 0, "no receive wait matched a peer's send wait in the merge")
    # One clock: rank 0's broadcast cannot end before rank 1's started (rank 0 waits for the root's data). Rank 1's
    # may well end before rank 0's starts: the root's sends complete into the shm rings whether rank 0 is there yet.
    first = {}
    for e in merged:
        if e.get("cat") == "call" and e["args"]["call"] == 1:
            first[e["pid"]] = e
    if 0 in first and 1 in first:
        check(first[0]["ts"] + first[0]["dur"] + 50 >= first[1]["ts"],
              f"clocks not aligned: rank 0's broadcast ends before the root's (rank 1) starts ({first})")
    lines = [l for l in res.stdout.splitlines() if l.startswith("rank ")]
    check(len(lines) == nranks, f"the tool's summary: {res.stdout}")
    # perf/plot_trace draws the last DDP step of the merge (where gnuplot is installed, as perf/plot_perf needs).
    plot = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(tool))), "perf", "plot_trace")
    if cut < 0 and shutil.which("gnuplot"):
        png = prefix + ".step.png"
        res = subprocess.run(["/usr/bin/python3", plot, out, png, "--last-ddp-step"], capture_output=True, text=True)
        check(res.returncode == 0 and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n",
              f"plot_trace failed ({res.returncode}): {res.stdout}{res.stderr}")

for p in problems:
    print("PROBLEM:", p)
print(f"checked {nranks} trace files and their merge: {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
