#!/usr/bin/env python3
"""DynamoDB endpoint benchmark: point Query latency and QPS over cdcviewd's DynamoDB endpoint
(`server.dynamodb`) beside its gRPC port, on the same daemon, store and queries in one run.
Prints figures, asserts nothing.

  1. N items (default 200,000; DynamoDB Streams JSON in a file) are applied by a cdcviewd with
     the view GSI1 (GSI1PK = DAY#<day>#<shard>, GSI1SK = the voter: a voter is unique in its
     partition, as query_bench's point queries), the DynamoDB endpoint and the gRPC port on.
  2. tests/bench/dynamodb_load (C++: an HTTP/1.1 keep-alive client on Boost.Beast with every
     request built beforehand; the gRPC side with blocking stubs and the lean HTTP/2 client of
     query_bench) sends point queries (partition and sort key EQ, Limit 1) over 20,000 random
     keys:
       closed loop  --connections connections (gRPC: threads), each sending its next query
                    when the previous answered: max QPS;
       open loop    --qps queries/s (default 5,000), latency from the time each query was due
                    (no coordinated omission); target p99 < 2 ms on the DynamoDB endpoint.
                    With --cpus split (on two or more cores) the client spins between sends
                    (both protocols) on its own core instead of sleeping: it stands for clients on other machines,
                    and on a VM each sleep ends with a halted vCPU's wake-up, which is the
                    client's latency, not the daemon's (--open-wait sleep measures it).
     and prints the ratios of the DynamoDB endpoint's figures to the gRPC port's. The open
     loop's latency is split: how late the client woke for each query (its own scheduling on
     a busy machine), how late it went out (also waiting for a free connection), and the time
     from the actual send to the answer (the endpoint's and the loopback's share), and of that
     the daemon's own time from a request read to its answer (its request duration histogram,
     snapshotted before that loop, while the client waits, and after the run); and after
     each open loop, the host's steal of each CPU meanwhile.

Python and boto3 cannot send 5,000 queries/s on two cores (boto3 spends about 1 ms of CPU per
call); the load generator is C++ and one thread. With --cpus split (the default, as
kafka_bench.py) the daemon runs on the upper half of the cores and the client on the lower half,
as a service and its clients run on other machines: a client sharing the daemon's core delays
its answers with its own timer wake-ups. --cpus shared lets both run anywhere. The ratio to the
gRPC port in the same run is the figure to compare across machines.

Usage: .venv/bin/python tests/bench/dynamodb_bench.py [--events N] [--qps Q]
           [--open-seconds S] [--closed-seconds S] [--connections C] [--tmp DIR]
           [--cpus split|shared] [--open-wait spin|sleep]
Build first: scripts/build.sh cdcviewd dynamodb_load (scripts/bench.sh does both).
Environment: CDCVIEW_BUILD_DIR (default <repo>/build).
"""

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, HERE)

from conftest import BUILD_DIR, Daemon  # noqa: E402
from kafka_bench import cpu_layout, histogram, pinned, quantile  # noqa: E402

LOAD_BIN = os.path.join(BUILD_DIR, "tests", "bench", "dynamodb_load")
OPEN_LOOP_NEXT = "dynamodb_load: the DynamoDB open loop is next"  # its kOpenLoopNext
DYNAMODB_LINE = re.compile(r"cdcviewd serving the DynamoDB API \(HTTPS?\) on port (\d+)", re.M)


def write_stream(path, events, seed):
    """`events` INSERTs of votes; returns the (GSI1PK, GSI1SK) of each."""
    rng = random.Random(seed)
    keys = []
    with open(path, "w", encoding="utf-8") as f:
        for n in range(events):
            day = f"2025-03-{1 + n % 28:02d}"
            pk = f"DAY#{day}#{rng.randrange(4)}"
            voter = f"u{n:07d}"
            image = {"PK": {"S": f"VOTE#{voter}"}, "SK": {"S": day}, "GSI1PK": {"S": pk},
                     "GSI1SK": {"S": voter}, "type": {"S": "vote"},
                     "weight": {"N": str(rng.randrange(1, 10))}}
            f.write(json.dumps({
                "eventID": f"e{n}", "eventName": "INSERT",
                "dynamodb": {"ApproximateCreationDateTime": 1740787200 + n,
                             "Keys": {"PK": image["PK"], "SK": image["SK"]},
                             "NewImage": image, "SequenceNumber": str(100000000 + n),
                             "StreamViewType": "NEW_AND_OLD_IMAGES"}},
                separators=(",", ":")) + "\n")
            keys.append((pk, voter))
    return keys


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=20250301)
    parser.add_argument("--qps", type=float, default=5000)
    parser.add_argument("--open-seconds", type=float, default=5)
    parser.add_argument("--closed-seconds", type=float, default=3)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--tmp", default=tempfile.gettempdir())
    parser.add_argument("--cpus", choices=("split", "shared"), default="split")
    parser.add_argument("--open-wait", choices=("spin", "sleep"),
                        help="the open loops' client between sends (default: spin when the "
                             "client has cores apart from the daemon's, as --cpus split gives "
                             "on two or more; else sleep)")
    args = parser.parse_args()
    daemon_cpus, client_cpus = cpu_layout(args.cpus)
    # Spinning pays only with a core apart from the daemon's (cpu_layout splits at least two).
    open_wait = args.open_wait or ("spin" if client_cpus else "sleep")
    if open_wait == "spin" and not client_cpus:
        print("dynamodb_bench: --open-wait spin without a core apart from the daemon's: the "
              "client's spinning takes the daemon's CPU time", file=sys.stderr)
    for binary in (LOAD_BIN, os.path.join(BUILD_DIR, "daemon", "cdcviewd")):
        if not os.access(binary, os.X_OK):
            raise SystemExit(f"missing {binary}: scripts/build.sh cdcviewd dynamodb_load")

    work = tempfile.mkdtemp(prefix="cdcview-dynamodb-bench.", dir=args.tmp)
    d = None
    try:
        stream = os.path.join(work, "votes.ndjson")
        keys = write_stream(stream, args.events, args.seed)
        home = os.path.join(work, "daemon")
        os.makedirs(home)
        d = Daemon(home, config={
            "storage": {"path": os.path.join(home, "store"), "map_size": "1GiB"},
            "server": {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0",
                       "dynamodb": "127.0.0.1:0"},
            "sources": [{"name": "votes", "table": "App",
                         "file": {"path": stream, "follow": False}}],
            "tables": [{"name": "App", "key": {"partition": "PK", "sort": "SK"},
                        "views": [{"name": "GSI1",
                                   "partition_key": {"attribute": "GSI1PK", "type": "S"},
                                   "sort_key": {"attribute": "GSI1SK", "type": "S"},
                                   "projection": "ALL"}]}]},
            prefix=pinned(daemon_cpus))
        started = time.monotonic()
        try:
            d.start()
        except (Exception, pytest.fail.Exception) as e:
            raise SystemExit(f"cdcviewd did not start ({e}); log:\n{d.log()[-2000:]}") from None
        match = DYNAMODB_LINE.search(d.log())
        if not match:
            raise SystemExit(f"cdcviewd logs no DynamoDB port; log:\n{d.log()[-2000:]}")
        port = int(match.group(1))
        wait_applied(d, args.events)
        print(f"== dynamodb_bench: {args.events} items applied in "
              f"{time.monotonic() - started:.1f} s; cdcviewd DynamoDB endpoint 127.0.0.1:{port}, "
              f"gRPC 127.0.0.1:{d.grpc_port}; cores: daemon {daemon_cpus or 'any'}, client "
              f"{client_cpus or 'any'} ==", flush=True)
        sample = random.Random(args.seed + 1).sample(keys, min(20000, len(keys)))
        keys_path = os.path.join(work, "keys.tsv")
        with open(keys_path, "w", encoding="utf-8") as f:
            f.writelines(f"{pk}\t{sk}\n" for pk, sk in sample)
        load = subprocess.Popen(pinned(client_cpus) + [
                                    LOAD_BIN, "--port", str(port), "--grpc-port", str(d.grpc_port),
                                    "--keys", keys_path, "--qps", str(args.qps),
                                    "--open-seconds", str(args.open_seconds),
                                    "--closed-seconds", str(args.closed_seconds),
                                    "--connections", str(args.connections),
                                    "--open-wait", open_wait, "--pause-before-open"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        before = None
        for line in load.stdout:
            if line.strip() == OPEN_LOOP_NEXT:  # the closed loops are done
                before = d.metrics()
                load.stdin.write("\n")
                load.stdin.flush()
            else:
                print(line, end="", flush=True)
        if load.wait() != 0:
            raise SystemExit(f"dynamodb_load failed (exit status {load.returncode})")
        if before is not None:
            print_daemon_time(before, d.metrics())
    finally:
        if d is not None:
            d.ensure_dead()
        shutil.rmtree(work, ignore_errors=True)


def print_daemon_time(before, after):
    """The daemon's own time for the DynamoDB open loop's queries, from a request read to its
    answer: its request duration histogram between the two snapshots (the gRPC loops after it
    do not count there)."""
    name, labels = "cdcview_dynamodb_api_request_duration_seconds", {"operation": "Query"}
    b, a = histogram(before, name, **labels), histogram(after, name, **labels)
    print(f"  DynamoDB open loop, inside cdcviewd (read to answer; its histogram, interpolated "
          f"within a bucket): p50 {quantile(b, a, 0.5) * 1000:.3f} ms  "
          f"p99 {quantile(b, a, 0.99) * 1000:.3f} ms", flush=True)


def wait_applied(d, events, timeout=600):
    """Until the daemon's metrics say every event is applied (no gRPC stubs needed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        applied = sum(v for (name, labels), v in d.metrics().items()
                      if name == "cdcview_events_total" and ("result", "applied") in labels)
        if applied >= events:
            return
        time.sleep(0.2)
    raise SystemExit(f"cdcviewd applied fewer than {events} events in {timeout} s")


if __name__ == "__main__":
    main()
