#!/usr/bin/env python3
"""Fan-out benchmark: reads through a partitioned cluster's coordinator against a standalone
daemon, on one machine, with a real Kafka broker and the same data. Prints figures, asserts
nothing (except that the cluster answers what the standalone daemon answers).

  1. N events (default 200,000, DynamoDB Streams JSON, each item in one partition) are
     produced to a fresh topic of 6 partitions (the integration tests' topics).
  2. A standalone cdcviewd (no `cluster:`) reads the whole topic into an empty store.
  3. For each size M of --members (default 1,2,3): M cdcviewd members with `cluster:`
     {members: M, ordinal: i, peers: [every member's gRPC address]} read the same topic, each
     into an empty store of its own (member i: partitions p with p % M == i). Member 0 is the
     coordinator every query goes to; it asks the others and merges.
  4. Against the standalone daemon, then each cluster (the standalone daemon again after the
     last cluster, so a drift of the machine's speed during the run shows): --clients client
     processes, each a closed loop for --seconds, first of
       point  Query on GSI1, EQ on a vote partition (DAY#<day>#<shard>) and its voter, limit 1
       range  Query on a GSI1 partition with at least 100 entries, limit 100
     Latency p50 / p99 and QPS (all clients together). Every cluster first answers a sample
     of the queries and must give the standalone daemon's entries (the run stops otherwise).
  5. Per daemon (the standalone one, every member): the events it applied, the seconds from
     its start until it had stored its partitions' high watermarks, events/s over them, and
     its store's size (cdcview_lmdb_map_used_bytes): ingest and storage per member. The
     seconds include the daemon's start-up; kafka_bench.py measures the ingest rate itself.

Every process shares the machine's cores (the broker, M members, the clients): the ratio to
the standalone daemon in the same run is the figure to compare, not the rates (see
docs/PERFORMANCE.md, "How to read these figures"). The clients are Python gRPC (about 100 µs of
their own per call), the same for every row.

Usage: .venv/bin/python tests/bench/cluster_bench.py [--events N] [--members M,M,...]
                                                     [--seconds S]
                                                     [--clients C] [--tmp DIR]
Environment: CDCVIEW_BUILD_DIR (cdcviewd), KAFKA_BOOTSTRAP (use a running broker instead of
starting one with scripts/kafka.sh).
"""

import argparse
import multiprocessing
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, HERE)

import reference as ref  # noqa: E402
import streams  # noqa: E402
from conftest import DAEMON_BIN, Daemon, Stubs  # noqa: E402
from kafka_bench import ddb_messages, make_stubs, start_broker  # noqa: E402
from kafka_fixture import PARTITIONS, SCRIPT, Kafka  # noqa: E402

RANGE_ROWS = 100
CALL_TIMEOUT_S = 10
# How many of the queries each cluster must answer as the standalone daemon does.
CHECKED_QUERIES = 200
# gRPC metadata asking a member for its own answer (daemon/server/cluster_peers.h).
LOCAL_ONLY = ("x-cdcview-local-only", "1")


def log(text):
    print(f"[cluster_bench] {text}", file=sys.stderr, flush=True)


def parse_members(text):
    """Cluster sizes, comma-separated ("": the standalone daemon only)."""
    try:
        sizes = [int(m) for m in text.split(",") if m.strip()]
    except ValueError:
        sizes = [0]
    if any(m < 1 or m > 1024 for m in sizes):
        raise argparse.ArgumentTypeError(
            f"expected cluster sizes from 1 to 1024, comma-separated, like 1,2,3; got {text!r}")
    return sizes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--members", type=parse_members, default=[1, 2, 3],
                        help="the cluster sizes to measure, comma-separated ('' for the "
                             "standalone daemon only)")
    parser.add_argument("--seconds", type=float, default=8.0,
                        help="how long each closed loop (point, range) runs per setup")
    parser.add_argument("--clients", type=int, default=2,
                        help="client processes, each one query at a time")
    parser.add_argument("--tmp", default=None, help="where to create the work directory")
    args = parser.parse_args(argv)
    if args.events < 1 or args.clients < 1 or args.seconds <= 0:
        parser.error("--events and --clients must be at least 1, --seconds above 0")
    return args


# ---------------------------------------------------------------- the queries

def final_items(records):
    """{(PK, SK): the item's last image} of the items alive after `records`."""
    live = {}
    for r in records:
        keys = r["dynamodb"]["Keys"]
        key = (keys["PK"]["S"], keys["SK"]["S"])
        if r["eventName"] == "REMOVE":
            live.pop(key, None)
        else:
            live[key] = r["dynamodb"]["NewImage"]
    return live


def pick_queries(records, count, seed=7):
    """(points, ranges): `count` of each, as (GSI1 partition, sort key or None) pairs. Points
    are a vote's day partition and voter (one entry); ranges are partitions with at least
    RANGE_ROWS entries."""
    by_partition = {}
    for item in final_items(records).values():
        if "GSI1PK" in item and "GSI1SK" in item:
            by_partition.setdefault(item["GSI1PK"]["S"], []).append(item["GSI1SK"]["S"])
    votes = sorted((pk, sk) for pk, sks in by_partition.items() if pk.startswith("DAY#")
                   for sk in sks)
    large = sorted(pk for pk, sks in by_partition.items() if len(sks) >= RANGE_ROWS)
    if not votes or not large:
        raise SystemExit(f"{len(records)} events give {len(votes)} votes and {len(large)} GSI1 "
                         f"partitions of {RANGE_ROWS}+ entries: raise --events")
    rng = random.Random(seed)
    return ([rng.choice(votes) for _ in range(count)],
            [(rng.choice(large), None) for _ in range(count)])


def request(vs, av, query):
    partition, sort = query
    if sort is None:
        return vs.QueryRequest(view="GSI1", partition_key=av.AttributeValue(s=partition),
                               limit=RANGE_ROWS)
    return vs.QueryRequest(view="GSI1", partition_key=av.AttributeValue(s=partition),
                           sort=vs.SortCondition(op=vs.SortCondition.EQ,
                                                 value=av.AttributeValue(s=sort)),
                           limit=1)


def client_loop(job):
    """One client process: queries `addr` one at a time for `seconds`, round-robin over
    `queries` from a random start; returns (latencies in seconds, errors)."""
    addr, stubs_dir, queries, seconds, seed = job
    import grpc
    stubs = Stubs(stubs_dir)
    requests = [request(stubs.vs, stubs.av, q) for q in queries]
    latencies, errors = [], 0
    with grpc.insecure_channel(addr) as channel:
        stub = stubs.grpc.ViewServiceStub(channel)
        stub.Query(requests[0], timeout=CALL_TIMEOUT_S)  # connected before the clock starts
        i = random.Random(seed).randrange(len(requests))
        end = time.monotonic() + seconds
        while True:
            start = time.monotonic()
            if start >= end:
                break
            try:
                stub.Query(requests[i % len(requests)], timeout=CALL_TIMEOUT_S)
                latencies.append(time.monotonic() - start)
            except grpc.RpcError:
                errors += 1
            i += 1
    return latencies, errors


def percentile(sorted_values, q):
    """The nearest-rank percentile of sorted values."""
    if not sorted_values:
        return float("nan")
    rank = max(1, int(round(q * len(sorted_values) + 0.5)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def measure(pool, addr, stubs_dir, queries, args):
    """(p50 s, p99 s, QPS, errors) of --clients closed loops over `queries` against `addr`."""
    jobs = [(addr, stubs_dir, queries, args.seconds, n) for n in range(args.clients)]
    started = time.monotonic()
    results = pool.map(client_loop, jobs)
    took = time.monotonic() - started
    latencies = sorted(x for got, _ in results for x in got)
    errors = sum(e for _, e in results)
    # QPS over the loops' own time, not the processes' start-up (at most `took`).
    return (percentile(latencies, 0.50), percentile(latencies, 0.99),
            len(latencies) / min(args.seconds, took), errors)


def answer(stub, stubs, query):
    """(partition key, sort key, table key) of each entry the query returns."""
    got = stub.Query(request(stubs.vs, stubs.av, query), timeout=CALL_TIMEOUT_S)
    return [(e.partition_key.s, e.sort_key.s, e.item.attributes["PK"].s,
             e.item.attributes["SK"].s) for e in got.entries]


# ---------------------------------------------------------------- the daemons

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def refused_cluster(text):
    """Stops the bench if cdcviewd's output `text` says it does not know `cluster:`."""
    if 'unknown field "cluster"' in text:
        raise SystemExit(
            "cdcviewd refused the `cluster:` block, so this build cannot run a partitioned "
            "cluster (issue 21): build a cdcviewd with cluster support (CDCVIEW_BUILD_DIR). "
            f"It said:\n{text[-2000:]}")


def check_cluster_support(work, args):
    """Before the data is made: the first cluster's member 0 config, through --print-config."""
    if not args.members:
        return
    home = os.path.join(work, "preflight")
    os.makedirs(home)
    members = args.members[0]
    config = daemon_config(home, source_config("127.0.0.1:9092", "topic", "group"))
    config["cluster"] = {"members": members, "ordinal": 0,
                         "peers": [f"127.0.0.1:{50051 + i}" for i in range(members)]}
    d = Daemon(home, config=config)
    p = subprocess.run([DAEMON_BIN, "--config", d.config_path, "--print-config"],
                       capture_output=True, text=True, timeout=30)
    refused_cluster(p.stderr)
    if p.returncode != 0:
        raise SystemExit(f"cdcviewd refuses a member's config:\n{p.stderr}")


def start_member(daemon):
    """Starts `daemon`; a daemon that refuses its `cluster:` block stops the bench, saying so."""
    try:
        daemon.start()
    except (Exception, pytest.fail.Exception) as e:  # conftest's Daemon: an early exit fails
        refused_cluster(daemon.log())
        raise SystemExit(f"cdcviewd did not start ({e}); log:\n{daemon.log()[-2000:]}") from None
    return daemon


def source_config(brokers, topic, group):
    return {"name": "app", "table": "App",
            "kafka": {"brokers": brokers, "topics": [topic], "group": group,
                      "start": "earliest"}}


def daemon_config(home, source, grpc_port=0):
    return {"sources": [source], "tables": [ref.EXAMPLE_TABLE],
            # The map is reserved on disk, which on tmpfs is memory, for up to four daemons at a
            # time: a small start (it grows as needed).
            "storage": {"path": os.path.join(home, "store"), "map_size": "256MiB"},
            "server": {"grpc": f"127.0.0.1:{grpc_port}", "metrics": "127.0.0.1:0"}}


def start_cluster(kafka, topic, members, work, stubs, watermarks, timeout):
    """`members` daemons with `cluster:`, each caught up with the partitions it owns within
    `timeout` seconds: (the daemons, an ingest row of each, see caught_up)."""
    ports = [free_port() for _ in range(members)]
    peers = [f"127.0.0.1:{p}" for p in ports]
    daemons, started = [], []
    try:
        for ordinal in range(members):
            home = os.path.join(work, f"cluster-{members}-member-{ordinal}")
            os.makedirs(home)
            config = daemon_config(home, source_config(kafka.bootstrap, topic,
                                                       f"bench-{topic}-{members}"),
                                   ports[ordinal])
            config["cluster"] = {"members": members, "ordinal": ordinal, "peers": peers}
            started.append(time.monotonic())
            daemons.append(start_member(Daemon(home, config=config, stubs=stubs)))
        owned = [{p: str(hw) for p, hw in watermarks.items()
                  if hw > 0 and int(p.rsplit("/", 1)[1]) % members == ordinal}
                 for ordinal in range(members)]
        rows = caught_up([(f"cluster of {members}, member {i}", d, owned[i], started[i])
                          for i, d in enumerate(daemons)], timeout)
    except BaseException:
        for d in daemons:
            d.ensure_dead()
        raise
    return daemons, rows


def local_source(d):
    """Daemon `d`'s own status of source app: GetStatus, answered locally only."""
    status = d.stub.GetStatus(d.stubs.vs.GetStatusRequest(), timeout=CALL_TIMEOUT_S,
                              metadata=[LOCAL_ONLY])
    [source] = [s for s in status.sources if s.name == "app"]
    return source


def caught_up(waits, timeout):
    """Polls every (name, daemon, positions it must store, when it was started) until each
    daemon stored its positions (its partitions' high watermarks), within `timeout` seconds.
    Returns an ingest row per daemon: (name, events applied, seconds from its start to caught
    up, LMDB bytes in use)."""
    deadline = time.monotonic() + timeout
    done = {}
    while len(done) < len(waits):
        for name, d, owned, started in waits:
            if name in done:
                continue
            source = local_source(d)
            got = {p.partition: p.position for p in source.positions}
            if got == owned:
                done[name] = (name, source.events_applied, time.monotonic() - started, d)
            elif time.monotonic() > deadline:
                raise SystemExit(
                    f"{name} ({d.addr}) did not catch up within {timeout:.0f} s: it has {got}, "
                    f"its partitions are {owned} (a member reads the partitions p with "
                    "p % members == ordinal, and no other)")
        time.sleep(0.05)
    rows = []
    for name, _, _, _ in waits:
        name, events, seconds, d = done[name]
        time.sleep(1.1)  # the map's use is sampled once a second
        rows.append((name, events, seconds, used_bytes(d)))
    return rows


def used_bytes(d):
    for (name, _), value in d.metrics().items():
        if name == "cdcview_lmdb_map_used_bytes":
            return value
    raise SystemExit(f"{d.addr}: no cdcview_lmdb_map_used_bytes in /metrics")


def stop_all(daemons):
    """Stops the daemons and removes their stores (on tmpfs they hold memory)."""
    for d in daemons:
        try:
            d.stop()
        finally:
            d.ensure_dead()
            shutil.rmtree(d.store, ignore_errors=True)


# ---------------------------------------------------------------- the run

def run(kafka, work, args):
    os.makedirs(os.path.join(work, "stubs"))
    stubs_dir = os.path.join(work, "stubs")
    stubs = make_stubs(stubs_dir)
    log(f"generating {args.events} events")
    records = streams.generate(args.events, seed=1, replay_every=10**9)
    points, ranges = pick_queries(records, 1000)
    topic = kafka.topic("cluster-bench")
    kafka.produce(topic, ddb_messages(records))
    watermarks = kafka.high_watermarks(topic)
    log(f"produced {len(records)} events to {topic} ({PARTITIONS} partitions)")

    home = os.path.join(work, "standalone")
    os.makedirs(home)
    standalone = Daemon(home, config=daemon_config(
        home, source_config(kafka.bootstrap, topic, f"bench-{topic}-standalone")), stubs=stubs)
    rows = []
    ctx = multiprocessing.get_context("spawn")  # no gRPC state crosses a fork
    with ctx.Pool(args.clients) as pool:
        try:
            t = time.monotonic()
            standalone.start()
            ingest = caught_up([("standalone", standalone,
                                 {p: str(hw) for p, hw in watermarks.items() if hw > 0}, t)],
                               timeout=3600)
            log(f"standalone caught up in {ingest[0][2]:.1f}s")
            checked = points[:CHECKED_QUERIES // 2] + ranges[:CHECKED_QUERIES // 2]
            want = [answer(standalone.stub, stubs, q) for q in checked]
            sizes = sorted({len(w) for w in want[:len(checked) // 2]}) + sorted(
                {len(w) for w in want[len(checked) // 2:]})
            if sizes != [1, RANGE_ROWS]:
                raise SystemExit(f"the standalone daemon's points and ranges return {sizes} "
                                 f"entries, not [1, {RANGE_ROWS}]: the queries are wrong")
            rows.append(("standalone", standalone.addr, 0))
            rows[-1] += measure_both(pool, standalone.addr, stubs_dir, points, ranges, args)
            for members in args.members:
                # A member reads a share of what the standalone daemon read, beside the others.
                daemons, member_rows = start_cluster(kafka, topic, members, work, stubs,
                                                     watermarks, max(120.0, 20 * ingest[0][2]))
                ingest += member_rows
                try:
                    coordinator = daemons[0]
                    got = [answer(coordinator.stub, stubs, q) for q in checked]
                    wrong = [(q, w, g) for q, w, g in zip(checked, want, got) if w != g]
                    if wrong:
                        q, w, g = wrong[0]
                        raise SystemExit(f"the {members}-member cluster answers {len(wrong)} of "
                                         f"{len(checked)} queries unlike the standalone daemon;"
                                         f" first: {q}: {len(g)} entries, want {len(w)}")
                    rows.append((f"cluster of {members}", coordinator.addr, members))
                    rows[-1] += measure_both(pool, coordinator.addr, stubs_dir, points, ranges,
                                             args)
                finally:
                    stop_all(daemons)
            rows.append(("standalone, again", standalone.addr, 0))
            rows[-1] += measure_both(pool, standalone.addr, stubs_dir, points, ranges, args)
        finally:
            standalone.ensure_dead()
    print_rows(rows, args)
    print_ingest(ingest)


def measure_both(pool, addr, stubs_dir, points, ranges, args):
    point = measure(pool, addr, stubs_dir, points, args)
    log(f"{addr}: point p50 {point[0] * 1e6:.0f} µs p99 {point[1] * 1e6:.0f} µs "
        f"{point[2]:.0f} QPS")
    rng = measure(pool, addr, stubs_dir, ranges, args)
    log(f"{addr}: range p50 {rng[0] * 1e6:.0f} µs p99 {rng[1] * 1e6:.0f} µs {rng[2]:.0f} QPS")
    return point, rng


def print_rows(rows, args):
    """One line per setup; the ratios are to the first standalone row."""
    print(f"cluster_bench: {args.events} events, {PARTITIONS} partitions, "
          f"{args.clients} closed-loop clients, {args.seconds:g} s per loop; load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'setup':<20} {'point p50':>10} {'p99':>8} {'QPS':>7} {'(x)':>5}   "
          f"{'range p50':>10} {'p99':>8} {'QPS':>7} {'(x)':>5}   errors")
    base_point, base_range = rows[0][3][2], rows[0][4][2]
    for name, _, _, point, rng in rows:
        print(f"{name:<20} {point[0] * 1e6:>7.0f} µs {point[1] * 1e6:>5.0f} µs {point[2]:>7.0f} "
              f"{point[2] / base_point:>5.2f}   {rng[0] * 1e6:>7.0f} µs {rng[1] * 1e6:>5.0f} µs "
              f"{rng[2]:>7.0f} {rng[2] / base_range:>5.2f}   {point[3] + rng[3]}")


def print_ingest(rows):
    """Per daemon: what it applied, how long from its start until caught up, its store."""
    print(f"{'ingest (from start)':<28} {'events':>8} {'seconds':>8} {'events/s':>9} "
          f"{'store MiB':>10}")
    for name, events, seconds, used in rows:
        print(f"{name:<28} {events:>8} {seconds:>8.1f} {events / seconds:>9.0f} "
              f"{used / (1 << 20):>10.1f}")


def main(argv=None):
    args = parse_args(argv)
    work = tempfile.mkdtemp(prefix="cdcview-cluster-bench.", dir=args.tmp)
    try:
        check_cluster_support(work, args)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    run_dir = os.path.join(work, "kafka")
    try:
        run(Kafka(start_broker(run_dir)), work, args)
    finally:
        if not os.environ.get("KAFKA_BOOTSTRAP"):
            subprocess.run([SCRIPT, "stop", run_dir], capture_output=True, text=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
