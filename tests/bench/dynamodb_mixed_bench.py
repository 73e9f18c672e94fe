#!/usr/bin/env python3
"""DynamoDB endpoint under mixed load: point Query latency while another client Scans whole
1 MB pages, for each given server.dynamodb_threads, on a daemon pinned to one CPU (a sidecar
limited to one core). Prints figures, asserts nothing.

  1. N items (default 200,000; dynamodb_bench.py's stream) are applied by a cdcviewd on the
     last CPU with the DynamoDB endpoint on and dynamodb_threads set.
  2. On the other CPUs, one process sends an unfiltered Scan of GSI1 (a 1 MB page, about 13k
     items) every --scan-pause-ms after the last one answered, while another sends --queries
     point Queries (partition and sort key EQ, Limit 1) one after another with a 2 ms pause,
     each timed from its send to its answer (Python's http.client: its own p50 is part of the
     figure; compare the rows, not with dynamodb_bench.py). Two processes, so that reading a
     1 MB answer does not hold the interpreter lock a point query's answer waits for.

What it shows: whether a long request holds the short ones. The pages run on the endpoint's
page threads at a lower priority than its I/O threads, which answer the point queries.

Usage: .venv/bin/python tests/bench/dynamodb_mixed_bench.py [--threads 1,2] [--runs R]
           [--events N] [--queries Q] [--scan-pause-ms P] [--tmp DIR]
Build first: scripts/build.sh cdcviewd.
"""

import argparse
import http.client
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)

from conftest import Daemon  # noqa: E402
from dynamodb_bench import DYNAMODB_LINE, wait_applied, write_stream  # noqa: E402
from kafka_bench import pinned  # noqa: E402

# A SigV4-shaped header, which an endpoint without tokens_file does not check.
HEADERS = {"Content-Type": "application/x-amz-json-1.0",
           "Authorization": "AWS4-HMAC-SHA256 Credential=a/20250101/us-east-1/dynamodb/"
                            "aws4_request, SignedHeaders=host, Signature=00"}


def post(conn, operation, body):
    conn.request("POST", "/", json.dumps(body),
                 {**HEADERS, "X-Amz-Target": f"DynamoDB_20120810.{operation}"})
    answer = conn.getresponse()
    data = answer.read()
    if answer.status != 200:
        raise SystemExit(f"{operation}: HTTP {answer.status}: {data[:300]!r}")
    return data


def scanner(port, pause_ms, stop, out):
    """Scans GSI1 until `stop`, in a process of its own (its reading of 1 MB answers holds no
    lock the point queries need); puts the list of Scan times on `out`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    while not stop.is_set():
        start = time.monotonic()
        post(conn, "Scan", {"TableName": "App", "IndexName": "GSI1"})
        times.append(time.monotonic() - start)
        stop.wait(pause_ms / 1000)
    out.put(times)


def run(stream, keys, threads, args, daemon_cpu):
    home = tempfile.mkdtemp(prefix="daemon.", dir=os.path.dirname(stream))
    d = Daemon(home, config={
        "storage": {"path": os.path.join(home, "store"), "map_size": "1GiB"},
        "server": {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0",
                   "dynamodb": "127.0.0.1:0", "dynamodb_threads": threads},
        "sources": [{"name": "votes", "table": "App",
                     "file": {"path": stream, "follow": False}}],
        "tables": [{"name": "App", "key": {"partition": "PK", "sort": "SK"},
                    "views": [{"name": "GSI1",
                               "partition_key": {"attribute": "GSI1PK", "type": "S"},
                               "sort_key": {"attribute": "GSI1SK", "type": "S"},
                               "projection": "ALL"}]}]},
        prefix=pinned(daemon_cpu))
    try:
        d.start()
        port = int(DYNAMODB_LINE.search(d.log()).group(1))
        wait_applied(d, args.events)
        stop = multiprocessing.Event()
        scans = multiprocessing.Queue()
        scanning = multiprocessing.Process(target=scanner,
                                           args=(port, args.scan_pause_ms, stop, scans))
        scanning.start()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        latency = []
        try:
            for pk, sk in keys[:args.queries]:
                body = {"TableName": "App", "IndexName": "GSI1", "Limit": 1,
                        "KeyConditionExpression": "GSI1PK = :p AND GSI1SK = :s",
                        "ExpressionAttributeValues": {":p": {"S": pk}, ":s": {"S": sk}}}
                start = time.monotonic()
                post(conn, "Query", body)
                latency.append(time.monotonic() - start)
                time.sleep(0.002)
        finally:
            stop.set()
            scanning.join(timeout=120)
        if scanning.exitcode != 0:
            raise SystemExit(f"dynamodb_mixed_bench: the scanning process failed "
                             f"(exit code {scanning.exitcode}); its error is above")
        scans = scans.get(timeout=10)
        latency.sort()
        scans.sort()
        p50, p99 = latency[len(latency) // 2], latency[int(len(latency) * 0.99)]
        scan_p50 = scans[len(scans) // 2] if scans else 0
        print(f"  dynamodb_threads {threads}: point Query p50 {p50 * 1000:.2f} ms  p99 "
              f"{p99 * 1000:.2f} ms  max {latency[-1] * 1000:.1f} ms ({len(latency)} queries); "
              f"{len(scans)} Scan pages, p50 {scan_p50 * 1000:.1f} ms", flush=True)
    finally:
        d.ensure_dead()
        shutil.rmtree(home, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default="1,2", help="dynamodb_threads values, in turn")
    parser.add_argument("--runs", type=int, default=2, help="rounds over --threads")
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=3000)
    parser.add_argument("--scan-pause-ms", type=float, default=200)
    parser.add_argument("--tmp", default=tempfile.gettempdir())
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("dynamodb_mixed_bench: needs two CPUs, one for the daemon")
    daemon_cpu = str(cpus[-1])
    os.sched_setaffinity(0, cpus[:-1])  # the clients stay off the daemon's CPU
    work = tempfile.mkdtemp(prefix="cdcview-dynamodb-mixed.", dir=args.tmp)
    try:
        stream = os.path.join(work, "votes.ndjson")
        keys = write_stream(stream, args.events, 20250301)
        print(f"== dynamodb_mixed_bench: {args.events} items, cdcviewd on CPU {daemon_cpu}, "
              f"a Scan page every {args.scan_pause_ms:.0f} ms after the last ==", flush=True)
        for n in range(args.runs):
            print(f"round {n + 1} of {args.runs}:", flush=True)
            for threads in (int(t) for t in args.threads.split(",")):
                run(stream, keys, threads, args, daemon_cpu)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
