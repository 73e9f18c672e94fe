#!/usr/bin/env python3
"""cdcviewd against its Kafka Streams peer (tests/bench/peers/kafka-streams) on one topic.

The same broker, the same pre-filled 6-partition topic (kafka_bench's events and layout), the
same core (--cpus split: cdcviewd, then the peer, on the upper half of the cores; the broker,
the producer and this script on the lower half), each starting empty:

  1. bulk: cdcviewd consumes and applies the topic (examples/cdcview.yaml's views and
     aggregates), then the peer does (exactly-once, RocksDB): events/s from the first applied
     (processed) event until caught up, and events per CPU-second of the process, from its
     start (the JVM's start-up and cdcviewd's included) and from the first applied event (when
     this script first sees one: a little of the work is before it); peak RSS (VmHWM) and bytes on disk after the phase
     (cdcviewd: LMDB's used map, and its directory; the peer: its state directory, and the
     broker's bytes of its changelog and repartition topics).
  2. lag: events for new items produced at half of *each one's* bulk rate (--lag-seconds, after
     --warm-seconds of the same pace, not measured), then at one fixed rate (--fixed-rate,
     default the lower of the two half rates) for both, by kafka_produce_bench to a topic of
     each one's own; p50/p99 of (visible - Kafka timestamp): cdcviewd's
     cdcview_replication_lag_seconds (commit), the peer's /lag histogram (the store write of a
     view or aggregate update, where a KeyQuery sees it; a RangeQuery sees it after the record
     cache's flush at the next commit, so that is a lower bound for the peer's range reads).
  3. queries at --qps (default 100) for --query-seconds each: a point read (cdcview: Query with the sort key
     EQ, limit 1, on the main gRPC port; the peer: KeyQuery by the whole entry key) and a
     100-entry range (cdcview: Query limit 100; the peer: RangeQuery over every partition,
     merged), over entries sampled from every view; latency from the scheduled send time, so a
     stall counts for every query it delays. Python clients for both (grpcio, http.client with
     keep-alive): the client's cost is in both figures.

Prints one table and the ratios. Preliminary at small sizes: a loaded machine moves every
figure. Needs: scripts/build.sh (cdcviewd, kafka_produce_bench), scripts/kafka-streams-peer.sh
build (run here if needed).

Usage: .venv/bin/python tests/bench/kafka_streams_compare.py [--events N] [--lag-seconds S]
         [--warm-seconds S] [--fixed-rate R] [--qps Q] [--query-seconds S] [--tmp DIR]
         [--cpus split|shared] [--linger-ms MS]
Environment: CDCVIEW_BUILD_DIR, KAFKA_BOOTSTRAP (as kafka_bench.py), PEER_HEAP (the peer's heap).
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kafka_bench as kb  # noqa: E402  (also puts tests/integration on sys.path)
import kafka_streams_peer  # noqa: E402
import streams  # noqa: E402
import yaml  # noqa: E402
from conftest import BUILD_DIR, EXAMPLE_CONFIG, Daemon, entry_to_tuple  # noqa: E402
from kafka_fixture import Kafka  # noqa: E402


def log(text):
    print(f"[compare] {text}", flush=True)


def vm_hwm(pid):
    """Peak resident set of `pid` in bytes (VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def du(*paths):
    """Bytes the files under `paths` occupy (du: allocated blocks)."""
    paths = [p for p in paths if os.path.exists(p)]
    if not paths:
        return 0
    out = subprocess.run(["du", "-s", "-B1", "-c"] + paths, capture_output=True, text=True,
                         check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def mib(n):
    return f"{n / 2**20:.0f} MiB"


def produce(kafka, topic, path, rate, seconds, linger_ms):
    """kafka_produce_bench: the records of `path` at `rate`/s for `seconds`; returns (sent, s)."""
    done = subprocess.run(
        [os.path.join(BUILD_DIR, "tests", "bench", "kafka_produce_bench"), "--brokers",
         kafka.bootstrap, "--topic", topic, "--input", path, "--rate", str(rate), "--seconds",
         str(seconds), "--linger-ms", str(linger_ms)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"kafka_produce_bench failed ({done.returncode}): {done.stderr}")
    found = re.search(r"produce: (\d+) messages in ([\d.]+) s", done.stdout)
    return int(found.group(1)), float(found.group(2))


def peer_histogram(peer):
    out = {}
    for bound, count in peer.get("/lag")["buckets"]:
        out[float("inf") if bound == "+Inf" else float(bound)] = count
    return out


class Side:
    """What one contender needs from the bench: how to wait, read the lag, query."""
    name = ""

    def lag_snapshot(self):
        raise NotImplementedError

    def wait_live(self, kafka, topic):
        raise NotImplementedError


def lag_phase(kafka, side, topic, work, tag, rate, seconds, warm_seconds, linger_ms, seed):
    """Warm-up at `rate` (not measured), then `seconds` at `rate`: (sent/s, p50 ms, p99 ms)."""
    warm = int(rate * warm_seconds)
    records = kb.live_records(warm + int(rate * seconds * 1.1) + 1000, seed=seed,
                              prefix=f"LIVE{tag}#")
    warm_path, path = (os.path.join(work, f"warm-{side.name}-{tag}.bin"),
                       os.path.join(work, f"lag-{side.name}-{tag}.bin"))
    kb.write_records(warm_path, records[:warm])
    kb.write_records(path, records[warm:])
    if warm:
        produce(kafka, topic, warm_path, rate, warm_seconds, linger_ms)
        side.wait_live(kafka, topic)
    time.sleep(1)
    before = side.lag_snapshot()
    sent, took = produce(kafka, topic, path, rate, seconds, linger_ms)
    side.wait_live(kafka, topic)
    after = side.lag_snapshot()
    p50 = kb.quantile(before, after, 0.5) * 1000
    p99 = kb.quantile(before, after, 0.99) * 1000
    log(f"{side.name} lag at {rate:.0f}/s requested ({sent} events in {took:.1f}s = "
        f"{sent / took:.0f}/s): p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    return sent / took, p50, p99


def timed_queries(send, queries, qps, seconds):
    """Sends queries[i % len] at `qps` on an absolute schedule for `seconds`; returns
    (p50 ms, p99 ms, count) of (answer time - scheduled time)."""
    latencies, start, i = [], time.monotonic(), 0
    n = int(qps * seconds)
    while i < n:
        due = start + i / qps
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        send(queries[i % len(queries)])
        latencies.append(time.monotonic() - due)
        i += 1
    latencies.sort()
    return (latencies[len(latencies) // 2] * 1000,
            latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000, n)


def sample_queries(d, views, rng, per_view=50):
    """(point, range) query lists from cdcview's Scan of every view: entries (pk, sk, item)."""
    points, ranges = [], []
    for view in views:
        entries = [entry_to_tuple(e) for e in d.scan(view)[0]]
        if not entries:
            continue
        for pk, sk, item in rng.sample(entries, min(per_view, len(entries))):
            points.append((view, pk, sk, item))
        pks = sorted({json.dumps(pk) for pk, _, _ in entries})
        for pk in rng.sample(pks, min(per_view, len(pks))):
            ranges.append((view, json.loads(pk)))
    rng.shuffle(points)
    rng.shuffle(ranges)
    return points, ranges


def av(stubs, typed):
    (kind, body), = typed.items()
    return stubs.av.AttributeValue(**{kind.lower(): body})


class CdcviewSide(Side):
    name = "cdcviewd"

    def __init__(self, daemon):
        self.d = daemon

    def lag_snapshot(self):
        return kb.histogram(self.d.metrics(), "cdcview_replication_lag_seconds")

    def wait_live(self, kafka, topic):
        kb.wait_positions(self.d, "live", {p: str(hw) for p, hw in
                                           kafka.high_watermarks(topic).items() if hw > 0},
                          timeout=600)

    def point(self, q):
        view, pk, sk, _ = q
        sort = None
        if sk is not None:
            sort = self.d.stubs.vs.SortCondition(op=self.d.stubs.vs.SortCondition.EQ,
                                                 value=av(self.d.stubs, sk))
        r = self.d.stub.Query(self.d.stubs.vs.QueryRequest(
            view=view, partition_key=av(self.d.stubs, pk), sort=sort, limit=1), timeout=10)
        assert len(r.entries) == 1

    def range(self, q):
        view, pk = q
        r = self.d.stub.Query(self.d.stubs.vs.QueryRequest(
            view=view, partition_key=av(self.d.stubs, pk), limit=100), timeout=10)
        assert r.entries


class PeerSide(Side):
    name = "peer"

    def __init__(self, peer):
        self.peer = peer
        self.conn = http.client.HTTPConnection("127.0.0.1", peer.port, timeout=10)

    def lag_snapshot(self):
        return peer_histogram(self.peer)

    def wait_live(self, kafka, topic):
        self.peer.wait_caught_up(timeout=600)

    def _get(self, path, query):
        self.conn.request("GET", path + "?" + urllib.parse.urlencode(query))
        r = self.conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"{path}: HTTP {r.status} {body[:500]!r}")
        return json.loads(body)

    def point(self, q):
        view, pk, sk, item = q
        query = {"view": view, "pk": json.dumps(pk), "tpk": json.dumps(item["PK"]),
                 "tsk": json.dumps(item["SK"])}
        if sk is not None:
            query["sk"] = json.dumps(sk)
        assert len(self._get("/point", query)["entries"]) == 1

    def range(self, q):
        view, pk = q
        assert self._get("/range", {"view": view, "pk": json.dumps(pk), "limit": "100"})["entries"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--lag-seconds", type=float, default=10.0)
    parser.add_argument("--warm-seconds", type=float, default=10.0,
                        help="the half-load pace for this long first, not measured (JIT, as "
                             "kafka_bench.py's --warm-seconds)")
    parser.add_argument("--fixed-rate", type=float, default=None,
                        help="the lag phase both run at (default: the lower half rate)")
    parser.add_argument("--qps", type=float, default=100.0,
                        help="queries per second, a rate both answer (latency counts from the "
                             "scheduled time: a server slower than that falls ever further behind)")
    parser.add_argument("--query-seconds", type=float, default=5.0)
    parser.add_argument("--linger-ms", type=float, default=5.0)
    parser.add_argument("--tmp", default=None)
    parser.add_argument("--cpus", choices=("split", "shared"), default="split")
    args = parser.parse_args()

    try:
        kafka_streams_peer.build()
    except kafka_streams_peer.BuildUnavailable as e:
        raise SystemExit(f"the peer cannot be built: {e}")
    daemon_cpus, other_cpus = kb.cpu_layout(args.cpus)
    if other_cpus:
        os.sched_setaffinity(0, {int(c) for c in other_cpus.split(",")})
        log(f"cores: cdcviewd, then the peer, on {daemon_cpus}; the broker, the producer and "
            f"this script on {other_cpus}")
    work = tempfile.mkdtemp(prefix="cdcview-ks-compare.", dir=args.tmp)
    run_dir = os.path.join(work, "kafka")
    bootstrap = kb.start_broker(run_dir)
    try:
        compare(Kafka(bootstrap), work, run_dir, args, daemon_cpus)
    finally:
        if not os.environ.get("KAFKA_BOOTSTRAP"):
            subprocess.run([kb.SCRIPT, "stop", run_dir], capture_output=True, text=True)
        shutil.rmtree(work, ignore_errors=True)


def compare(kafka, work, run_dir, args, daemon_cpus):
    stubs = kb.make_stubs(os.makedirs(os.path.join(work, "stubs")) or os.path.join(work, "stubs"))
    with open(EXAMPLE_CONFIG, encoding="utf-8") as f:
        table = yaml.safe_load(f)["tables"][0]
    views = [v["name"] for v in table["views"]]
    log(f"generating {args.events} events")
    records = streams.generate(args.events, seed=1, replay_every=10**9)
    topic = kafka.topic("cmp-bulk")
    live_cdc, live_peer = kafka.topic("cmp-live-cdc"), kafka.topic("cmp-live-peer")
    t = time.monotonic()
    kafka.produce(topic, kb.ddb_messages(records))
    log(f"produced {len(records)} events to {topic} in {time.monotonic() - t:.1f}s")
    want = {p: str(hw) for p, hw in kafka.high_watermarks(topic).items() if hw > 0}
    prefix = kb.pinned(daemon_cpus)
    results = {"cdcviewd": {}, "peer": {}}

    # ---- bulk, cdcviewd
    props = {"heartbeat.interval.ms": "300", "session.timeout.ms": "6000"}
    bulk = {"name": "bulk", "table": "App", "kafka": {"brokers": kafka.bootstrap,
                                                      "topics": [topic], "group": f"cmp-{topic}",
                                                      "properties": props}}
    home = os.path.join(work, "cdcviewd")
    os.makedirs(home)
    storage = {"path": os.path.join(home, "store"), "map_size": "2GiB"}
    d = Daemon(home, config={"sources": [bulk], "tables": [table], "storage": storage},
               stubs=stubs, prefix=prefix)
    try:
        d.start()
        first, cpu_first, deadline = None, None, time.monotonic() + 3600
        while True:  # kafka_bench.wait_positions, with the CPU used when the first batch shows
            got, now = d.positions("bulk"), time.monotonic()
            if got and first is None:
                first, cpu_first = now, kb.process_cpu(d.proc.pid)
            if got == want:
                done = now
                break
            if now > deadline:
                raise SystemExit(f"cdcviewd did not catch up: {got} vs {want}")
            time.sleep(0.05)
        cpu = kb.process_cpu(d.proc.pid)
        metrics = d.metrics()
        used = next((v for (name, _), v in metrics.items()
                     if name == "cdcview_lmdb_map_used_bytes"), 0)
        rss = vm_hwm(d.proc.pid)
        d.stop()
    finally:
        d.ensure_dead()
    r = results["cdcviewd"]
    r["rate"] = args.events / (done - first)
    r["cpu"] = cpu
    r["per_cpu"] = args.events / cpu
    r["per_cpu_run"] = args.events / (cpu - cpu_first)
    r["rss"], r["disk"], r["disk_detail"] = rss, used, f"LMDB map used; {mib(du(storage['path']))} allocated"
    log(f"cdcviewd bulk: {args.events} events in {done - first:.1f}s = {r['rate']:.0f}/s; "
        f"{cpu:.1f} CPU-s (from its start) = "
        f"{r['per_cpu']:.0f} events per CPU-second; peak RSS {mib(rss)}; LMDB used {mib(used)}")

    # ---- bulk, the peer
    app = "cmp-peer"
    state = os.path.join(work, "peer-state")
    peer = kafka_streams_peer.Peer(kafka.bootstrap, [topic, live_peer], state,
                                   os.path.join(work, "peer.log"), app, prefix=prefix)
    try:
        peer.wait_serving()
        cpu_first = []
        first, done = peer.wait_caught_up(
            timeout=3600, input_records=args.events,
            on_first=lambda: cpu_first.append(kb.process_cpu(peer.pid)))
        cpu = kb.process_cpu(peer.pid)
        rss = vm_hwm(peer.pid)
        peer.stop()
    finally:
        peer.ensure_dead()
    data = os.path.join(run_dir, "data")  # absent with KAFKA_BOOTSTRAP: not counted
    broker_dirs = [os.path.join(data, name) for name in
                   (os.listdir(data) if os.path.isdir(data) else []) if name.startswith(app)]
    r = results["peer"]
    r["rate"] = args.events / (done - first)
    r["cpu"] = cpu
    r["per_cpu"] = args.events / cpu
    r["per_cpu_run"] = args.events / (cpu - cpu_first[0])
    local, remote = du(state), du(*broker_dirs)
    r["rss"], r["disk"] = rss, local + remote
    r["disk_detail"] = f"state dir {mib(local)} + broker topics {mib(remote)}"
    log(f"peer bulk: {args.events} events in {done - first:.1f}s = {r['rate']:.0f}/s; "
        f"{cpu:.1f} CPU-s (from its start) = {r['per_cpu']:.0f} events per CPU-second; peak RSS {mib(rss)}; "
        f"disk {r['disk_detail']}")

    fixed = args.fixed_rate or min(results["cdcviewd"]["rate"], results["peer"]["rate"]) / 2
    rng = random.Random(5)

    # ---- lag and queries, cdcviewd (restarted on its store with a live source, as kafka_bench)
    live_source = {"name": "live", "table": "App", "kafka": {
        "brokers": kafka.bootstrap, "topics": [live_cdc], "group": f"cmp-{live_cdc}",
        "properties": dict({"fetch.wait.max.ms": "5", "fetch.min.bytes": "262144"}, **props)}}
    d.write_config({"sources": [bulk, live_source], "tables": [table], "storage": storage})
    try:
        d.start()
        side = CdcviewSide(d)
        r = results["cdcviewd"]
        # Sampled before any live event: entries both hold.
        points, ranges = sample_queries(d, views, rng)
        r["half"] = lag_phase(kafka, side, live_cdc, work, "1", r["rate"] / 2, args.lag_seconds,
                              args.warm_seconds, args.linger_ms, seed=2)
        r["fixed"] = lag_phase(kafka, side, live_cdc, work, "2", fixed, args.lag_seconds, 0,
                               args.linger_ms, seed=3)
        r["point"] = timed_queries(side.point, points, args.qps, args.query_seconds)
        r["range"] = timed_queries(side.range, ranges, args.qps, args.query_seconds)
        log(f"cdcviewd queries at {args.qps:.0f}/s: point p50/p99 {r['point'][0]:.2f}/"
            f"{r['point'][1]:.2f} ms, range p50/p99 {r['range'][0]:.2f}/{r['range'][1]:.2f} ms")
        d.stop()
    finally:
        d.ensure_dead()

    # ---- lag and queries, the peer (restarted on its state)
    peer = kafka_streams_peer.Peer(kafka.bootstrap, [topic, live_peer], state,
                                   os.path.join(work, "peer-2.log"), app, prefix=prefix)
    try:
        peer.wait_serving()
        peer.wait_caught_up(timeout=600)
        side = PeerSide(peer)
        r = results["peer"]
        r["half"] = lag_phase(kafka, side, live_peer, work, "1", r["rate"] / 2, args.lag_seconds,
                              args.warm_seconds, args.linger_ms, seed=2)
        r["fixed"] = lag_phase(kafka, side, live_peer, work, "2", fixed, args.lag_seconds, 0,
                               args.linger_ms, seed=3)
        r["point"] = timed_queries(side.point, points, args.qps, args.query_seconds)
        r["range"] = timed_queries(side.range, ranges, args.qps, args.query_seconds)
        log(f"peer queries at {args.qps:.0f}/s: point p50/p99 {r['point'][0]:.2f}/"
            f"{r['point'][1]:.2f} ms, range p50/p99 {r['range'][0]:.2f}/{r['range'][1]:.2f} ms")
        peer.stop()
    finally:
        peer.ensure_dead()

    c, p = results["cdcviewd"], results["peer"]

    def ratio(a, b):
        return f"{a / b:.2f}x" if b else "-"

    print()
    print(f"compare: {args.events} events, 7 views and 2 aggregates (examples/cdcview.yaml); "
          f"cores: {'each on ' + daemon_cpus if daemon_cpus else 'all shared'}; "
          f"{kb.filesystem(work)} under {work}")
    rows = [
        ("bulk events/s", c["rate"], p["rate"], "{:.0f}", True),
        ("events per CPU-second (from process start)", c["per_cpu"], p["per_cpu"], "{:.0f}",
         True),
        ("events per CPU-second (from first applied)", c["per_cpu_run"], p["per_cpu_run"],
         "{:.0f}", True),
        (f"lag p50 ms at half own rate ({c['half'][0]:.0f} / {p['half'][0]:.0f}/s)",
         c["half"][1], p["half"][1], "{:.1f}", False),
        ("lag p99 ms at half own rate", c["half"][2], p["half"][2], "{:.1f}", False),
        (f"lag p50 ms at {fixed:.0f}/s", c["fixed"][1], p["fixed"][1], "{:.1f}", False),
        (f"lag p99 ms at {fixed:.0f}/s", c["fixed"][2], p["fixed"][2], "{:.1f}", False),
        (f"point query p50 ms at {args.qps:.0f}/s", c["point"][0], p["point"][0], "{:.2f}", False),
        ("point query p99 ms", c["point"][1], p["point"][1], "{:.2f}", False),
        (f"range (100) query p50 ms at {args.qps:.0f}/s", c["range"][0], p["range"][0],
         "{:.2f}", False),
        ("range (100) query p99 ms", c["range"][1], p["range"][1], "{:.2f}", False),
        ("peak RSS MiB", c["rss"] / 2**20, p["rss"] / 2**20, "{:.0f}", False),
        ("bytes on disk after bulk, MiB", c["disk"] / 2**20, p["disk"] / 2**20, "{:.1f}", False),
    ]
    print(f"| {'measure':<46} | {'cdcviewd':>10} | {'peer':>10} | cdcviewd better by |")
    print(f"|{'-' * 48}|{'-' * 12}|{'-' * 12}|--------------------|")
    for label, a, b, fmt, higher_better in rows:
        better = ratio(a, b) if higher_better else ratio(b, a)
        print(f"| {label:<46} | {fmt.format(a):>10} | {fmt.format(b):>10} | {better:>18} |")
    print(f"compare: disk: cdcviewd {c['disk_detail']}; peer {p['disk_detail']}")
    print(f"compare: target >= 5x the peer's events per CPU-second: "
          f"{'met' if c['per_cpu_run'] >= 5 * p['per_cpu_run'] else 'NOT met'} "
          f"({c['per_cpu_run'] / p['per_cpu_run']:.1f}x from the first applied event, "
          f"{c['per_cpu'] / p['per_cpu']:.1f}x from process start); lower p99 lag at {fixed:.0f}/s: "
          f"{'met' if c['fixed'][2] < p['fixed'][2] else 'NOT met'}")


if __name__ == "__main__":
    main()
