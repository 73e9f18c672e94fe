#!/usr/bin/env python3
"""Kafka source benchmark: a real broker, a pre-filled 6-partition topic, the example table's
six views. Prints figures, asserts nothing.

  1. N events (default 1,000,000, DynamoDB Streams JSON, each item in one partition) are
     produced to a fresh topic.
  2. A bare librdkafka loop (kafka_consume_bench) reads the whole topic: the raw consume rate.
  3. cdcviewd consumes and applies the same topic (new group, empty store): events/s from its
     first applied batch until every partition's stored offset reaches the high watermark.
  4. cdcviewd applies the same events from a file (the file source): the storage ceiling.
  5. Replication lag at half load: events produced at 50% of step 3's rate for --lag-seconds
     to a second topic the same cdcviewd follows; p50/p99 of cdcview_replication_lag_seconds
     (commit time - Kafka message timestamp), interpolated within the histogram's buckets.

Usage: .venv/bin/python tests/bench/kafka_bench.py [--events N] [--lag-seconds S] [--tmp DIR]
  --tmp DIR: where the broker's data and the stores live (default: the system's temp dir);
  /dev/shm puts them on tmpfs, where a commit's sync costs nothing (the CPU-bound figures).
Environment: CDCVIEW_BUILD_DIR (cdcviewd, kafka_consume_bench), KAFKA_BOOTSTRAP (use a running
broker instead of starting one with scripts/kafka.sh), KAFKA_BENCH_STORAGE (JSON merged into
both daemons' storage section, e.g. '{"write_map": false}').
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

import reference as ref  # noqa: E402
import streams  # noqa: E402
from conftest import BUILD_DIR, Daemon, Stubs, expected_position, parse_metrics  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from kafka_fixture import SCRIPT, Kafka, partition_of  # noqa: E402


def log(text):
    print(f"[kafka_bench] {text}", flush=True)


def make_stubs(out):
    from grpc_tools import protoc
    proto_root = os.path.join(REPO, "proto")
    files = sorted(os.path.join("cdcview", "v1", f)
                   for f in os.listdir(os.path.join(proto_root, "cdcview", "v1"))
                   if f.endswith(".proto"))
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    if protoc.main(["protoc", f"-I{proto_root}", f"-I{include}", f"--python_out={out}",
                    f"--grpc_python_out={out}"] + files) != 0:
        raise SystemExit("grpc_tools.protoc failed")
    return Stubs(out)


def ddb_messages(records):
    out = []
    for r in records:
        keys = r["dynamodb"]["Keys"]
        key = f"{keys['PK']['S']}\x00{keys['SK']['S']}"
        out.append((partition_of(key), key.encode(), json.dumps(r).encode()))
    return out


def wait_positions(d, source, want, timeout=3600):
    """Waits until `source` stored `want`; returns (time of the first stored position, end)."""
    first = None
    deadline = time.monotonic() + timeout
    while True:
        got = d.positions(source)
        now = time.monotonic()
        if got and first is None:
            first = now
        if got == want:
            return first, now
        if now > deadline:
            raise SystemExit(f"{source} did not catch up: {got} vs {want}")
        time.sleep(0.05)


def histogram(metrics, name):
    """{upper bound: cumulative count} of an unlabelled histogram."""
    out = {}
    for (metric, labels), value in metrics.items():
        if metric == f"{name}_bucket":
            le = dict(labels)["le"]
            out[float("inf") if le == "+Inf" else float(le)] = value
    return out


def quantile(before, after, q):
    """q-quantile of the observations between two snapshots, linear within a bucket."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0) for b in bounds]
    total = counts[-1]
    if total <= 0:
        return float("nan")
    rank, lower, previous = q * total, 0.0, 0
    for bound, cumulative in zip(bounds, counts):
        if cumulative >= rank:
            if bound == float("inf"):
                return lower
            inside = cumulative - previous
            return lower + (bound - lower) * ((rank - previous) / inside if inside else 1)
        lower, previous = bound, cumulative
    return bounds[-2]


def produce_paced(kafka, topic, records, rate, seconds):
    # linger.ms 1: the lag measured is what a latency-minded producer sees.
    p2 = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 1, "acks": "all"})
    start = time.monotonic()
    n = 0
    for partition, key, value in ddb_messages(records):
        if time.monotonic() - start > seconds:
            break
        p2.produce(topic, value=value, key=key, partition=partition)
        n += 1
        if n % 50 == 0:
            p2.poll(0)
            ahead = start + n / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    p2.flush(60)
    return n, time.monotonic() - start


def filesystem(path):
    """The type of the filesystem holding `path`, from /proc/mounts (longest mount prefix)."""
    best, kind = "", "unknown"
    with open("/proc/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            mount = fields[1]
            inside = path == mount or path.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) > len(best):
                best, kind = mount, fields[2]
    return kind


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--lag-seconds", type=float, default=20.0)
    parser.add_argument("--tmp", default=None, help="where to create the work directory")
    parser.add_argument("--lag-rate", type=float, default=None,
                        help="events/s for the lag phase (default: half the measured rate)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="cdcview-kafka-bench.", dir=args.tmp)
    run_dir = os.path.join(work, "kafka")
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if not bootstrap:
        started = subprocess.run([SCRIPT, "start", run_dir], capture_output=True, text=True)
        if started.returncode != 0:
            raise SystemExit(f"scripts/kafka.sh start failed:\n{started.stderr}")
        bootstrap = started.stdout.strip().splitlines()[-1]
    try:
        run(Kafka(bootstrap), work, args)
    finally:
        if not os.environ.get("KAFKA_BOOTSTRAP"):
            subprocess.run([SCRIPT, "stop", run_dir], capture_output=True, text=True)
        shutil.rmtree(work, ignore_errors=True)  # on tmpfs it would hold gigabytes of memory


def run(kafka, work, args):
    os.makedirs(os.path.join(work, "stubs"))
    stubs = make_stubs(os.path.join(work, "stubs"))
    log(f"generating {args.events} events")
    records = streams.generate(args.events, seed=1, replay_every=10**9)
    topic, lag_topic = kafka.topic("bench"), kafka.topic("bench-lag")
    t = time.monotonic()
    kafka.produce(topic, ddb_messages(records))
    log(f"produced {len(records)} events to {topic} in {time.monotonic() - t:.1f}s")
    want = {p: str(hw) for p, hw in kafka.high_watermarks(topic).items() if hw > 0}

    raw = subprocess.run([os.path.join(BUILD_DIR, "tests", "bench", "kafka_consume_bench"),
                          "--brokers", kafka.bootstrap, "--topic", topic],
                         capture_output=True, text=True, check=True).stdout.strip()
    raw_rate = float(re.search(r"= (\d+) msg/s", raw).group(1))
    log(raw)

    table = ref.EXAMPLE_TABLE
    props = dict({"heartbeat.interval.ms": "300", "session.timeout.ms": "6000"},
                 **json.loads(os.environ.get("KAFKA_BENCH_PROPERTIES", "{}")))
    config = {"sources": [
        {"name": "bulk", "table": "App", "kafka": {"brokers": kafka.bootstrap, "topics": [topic],
                                                    "group": f"bench-{topic}", "properties": props}},
        {"name": "live", "table": "App", "kafka": {"brokers": kafka.bootstrap,
                                                    "topics": [lag_topic], "start": "latest",
                                                    "group": f"bench-{lag_topic}",
                                                    "properties": props}}],
        "tables": [table]}
    os.makedirs(os.path.join(work, "kafka-daemon"))
    storage = json.loads(os.environ.get("KAFKA_BENCH_STORAGE", "{}"))
    d = Daemon(os.path.join(work, "kafka-daemon"), config=dict(
        config, storage=dict({"path": os.path.join(work, "kafka-daemon", "store"),
                              "map_size": "2GiB"}, **storage)), stubs=stubs)
    try:
        d.start()
        first, done = wait_positions(d, "bulk", want)
        kafka_rate = args.events / (done - first)
        log(f"cdcviewd (kafka) applied {args.events} events in {done - first:.1f}s "
            f"= {kafka_rate:.0f} events/s")

        # Replication lag at half the rate cdcviewd sustained.
        time.sleep(2)
        before = histogram(d.metrics(), "cdcview_replication_lag_seconds")
        count = int(max(kafka_rate, args.lag_rate or 0) * args.lag_seconds) + 1000
        live = streams.generate(count, seed=2, replay_every=10**9)
        for r in live:  # creation time = the Kafka message timestamp (ms), not the record's
            r["dynamodb"].pop("ApproximateCreationDateTime", None)
            for image in ("Keys", "NewImage", "OldImage"):  # items of their own
                if image in r["dynamodb"]:
                    r["dynamodb"][image]["PK"]["S"] = "LIVE" + r["dynamodb"][image]["PK"]["S"]
        lag_rate = args.lag_rate or kafka_rate / 2
        sent, took = produce_paced(kafka, lag_topic, live, lag_rate, args.lag_seconds)
        lag_want = {p: str(hw) for p, hw in kafka.high_watermarks(lag_topic).items() if hw > 0}
        wait_positions(d, "live", lag_want, timeout=300)
        after = histogram(d.metrics(), "cdcview_replication_lag_seconds")
        p50, p99 = quantile(before, after, 0.5) * 1000, quantile(before, after, 0.99) * 1000
        d.stop()
    finally:
        d.ensure_dead()

    path = os.path.join(work, "events.ndjson")
    streams.write(path, records)
    os.makedirs(os.path.join(work, "file-daemon"))
    f = Daemon(os.path.join(work, "file-daemon"), config={
        "sources": [{"name": "file", "table": "App", "file": {"path": path}}], "tables": [table],
        "storage": dict({"path": os.path.join(work, "file-daemon", "store"), "map_size": "2GiB"},
                        **storage)},
        stubs=stubs)
    try:
        f.start()
        first, done = wait_positions(f, "file", {"": expected_position(path)})
        file_rate = args.events / (done - first)
        f.stop()
    finally:
        f.ensure_dead()
    log(f"cdcviewd (file) applied {args.events} events in {done - first:.1f}s = {file_rate:.0f} events/s")

    bound = min(raw_rate, file_rate)
    print()
    print(f"kafka: stores and broker under {work} ({filesystem(work)})")
    print(f"kafka: cdcviewd consumed+applied {args.events} events, 6 views: {kafka_rate:.0f} events/s")
    print(f"kafka: bare librdkafka consume loop, same topic: {raw_rate:.0f} msg/s "
          f"(cdcviewd / raw = {kafka_rate / raw_rate:.2f})")
    print(f"kafka: file source, same events (storage ceiling): {file_rate:.0f} events/s "
          f"(cdcviewd / ceiling = {kafka_rate / file_rate:.2f})")
    print(f"kafka: target >= 80% of min(raw, ceiling) = {0.8 * bound:.0f} events/s: "
          f"{'met' if kafka_rate >= 0.8 * bound else 'NOT met'}")
    load = "50% load" if not args.lag_rate else f"{args.lag_rate:.0f}/s requested"
    print(f"kafka: replication lag at {load} ({sent} events in {took:.1f}s = "
          f"{sent / took:.0f}/s): p50 {p50:.1f} ms, p99 {p99:.1f} ms "
          f"(target p99 < 50 ms: {'met' if p99 < 50 else 'NOT met'})")


if __name__ == "__main__":
    main()
