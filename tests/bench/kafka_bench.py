#!/usr/bin/env python3
"""Kafka source benchmark: a real broker, a pre-filled 6-partition topic, the example table's
six views. Prints figures, asserts nothing.

  1. N events (default 1,000,000, DynamoDB Streams JSON, each item in one partition) are
     produced to a fresh topic.
  2. A bare librdkafka loop (kafka_consume_bench) reads the whole topic: the raw consume rate.
  3. cdcviewd consumes and applies the same topic (new group, empty store): events/s from its
     first applied batch until every partition's stored offset reaches the high watermark.
  4. cdcviewd applies the same events from a file (the file source): the storage ceiling.
     Steps 3 and 4 run --rounds times each (default 2), in the order Kafka, file, file, Kafka
     (then again), each on an empty store, and each rate is over all its rounds: this VM's
     speed drifts by 20% and more within minutes, and a drift during the run then weighs on
     both alike. (One round each, Kafka then file, gave ratios from 0.80 to 1.04 within an
     hour.)
  5. Replication lag at half load: events produced at 50% of step 3's rate for --lag-seconds
     to a second topic the same cdcviewd follows, by kafka_produce_bench (C++, librdkafka,
     pre-encoded records on an absolute schedule, linger.ms --linger-ms); p50/p99 of
     cdcview_replication_lag_seconds (commit time - Kafka message timestamp, which librdkafka
     sets when the record is produced, so the producer's linger is inside the lag),
     interpolated within the histogram's buckets, also second by second (with the p99 inside
     cdcviewd and of the writer's queue, write and commit stages,
     cdcview_apply_stage_seconds); the mean is exact.
     The same pace for --warm-seconds first (default 10) is not measured: the broker's JVM has
     to compile its small-request code paths, which took it as much CPU as the daemon.
     The live source fetches with fetch.wait.max.ms --live-fetch-wait-ms (default 5) and
     fetch.min.bytes 256 KiB (see live_fetch). --kafka-alone then adds the Kafka part of the lag
     alone (a bare consumer with the same fetch settings, no cdcviewd).
     Before the lag phase, cpu_jitter_bench times the same 0.25 ms of CPU work on cdcviewd's
     core, back to back, after 3 ms idle and after 3 ms spinning: how steady the machine
     itself is.
  6. The same lag at lower loads (--lag-sweep, default 10%, 20% and 30% of step 3's rate,
     --sweep-seconds each): the highest of them whose p99 is within the target.

Where each process runs (--cpus): "split" (the default on a machine with two or more cores)
gives cdcviewd, the bare consume loop and the bare follower the upper half of the cores, and the
broker, the producer and this script the lower half, in every phase: in production the broker
and the producers are other machines, and cdcviewd, a sidecar, has a CPU limit of its own. So
"the maximum rate" is what cdcviewd does on its half, and half load leaves the other half to
the broker and the producer. "shared" lets every process run on every core, as the bench did
until 2026-11: on a 2-core machine the broker and the producer then take CPU from the daemon in
the lag phase but not in the bulk phase, and half of the bulk rate saturated the machine.

Usage: .venv/bin/python tests/bench/kafka_bench.py [--events N] [--lag-seconds S] [--tmp DIR]
                                                   [--cpus split|shared]
                                                   [--lag-rate R] [--linger-ms MS]
                                                   [--warm-seconds S] [--kafka-alone]
                                                   [--live-fetch-wait-ms MS]
                                                   [--lag-sweep F,F,...] [--sweep-seconds S]
                                                   [--rounds R]
  --tmp DIR: where the broker's data and the stores live (default: the system's temp dir);
  /dev/shm puts them on tmpfs, where a commit's sync costs nothing (the CPU-bound figures).
Environment: CDCVIEW_BUILD_DIR (cdcviewd, kafka_consume_bench, kafka_produce_bench,
cpu_jitter_bench), KAFKA_BOOTSTRAP (use a running broker instead of starting one with
scripts/kafka.sh; KAFKA_BENCH_BROKER_PID then names its JVM for the CPU figures and --cpus
split moves it to the lower half of the cores), KAFKA_BENCH_STORAGE (JSON
merged into both daemons' storage section, e.g. '{"write_map": false}'),
KAFKA_BENCH_PROPERTIES (JSON: librdkafka properties of the daemon's sources), KAFKA_BENCH_APPLY
(JSON: both daemons' apply section, e.g. '{"max_delay_ms": 0}'),
KAFKA_BENCH_PERF (a directory: `perf record --call-graph dwarf` of cdcviewd during the bulk
phases, kafka-<round>.data and file-<round>.data, and the half-load lag phase, lag.data; it
slows the profiled daemon, so its figures are not the bench's), KAFKA_BENCH_LOGS (a directory
the daemons' logs are copied to).

Each phase prints the CPU seconds of cdcviewd's threads (by name; the writer is cdcview-writer,
the Kafka consumer threads kafka:<source>, librdkafka's rdk:*), how long each waited for a CPU
and slept, the broker JVM's and the whole machine's CPU seconds, the load average and the mean
batch the writer committed.
"""

import argparse
import collections
import glob
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

import reference as ref  # noqa: E402
import streams  # noqa: E402
from conftest import BUILD_DIR, Daemon, Stubs, expected_position  # noqa: E402
from kafka_fixture import SCRIPT, Kafka, partition_of  # noqa: E402

# Replication lag p99 at half of the bulk rate, with the default settings (docs/PERFORMANCE.md).
LAG_TARGET_MS = 10


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


def histogram(metrics, name, **labels):
    """{upper bound: cumulative count} of a histogram: the series with `labels` (none: the
    unlabelled one)."""
    out = {}
    for (metric, series_labels), value in metrics.items():
        if metric == f"{name}_bucket":
            series = dict(series_labels)
            le = series.pop("le")
            if series == labels:
                out[float("inf") if le == "+Inf" else float(le)] = value
    return out


def quantile(before, after, q):
    """q-quantile of the observations between two snapshots, linear within a bucket."""
    bounds = sorted(after)
    if not bounds:  # not exported (a cdcviewd built before the metric existed)
        return float("nan")
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


def live_records(n, seed, prefix):
    """`n` generated records on items of their own (`prefix` before every PK), without
    ApproximateCreationDateTime: their creation time is the Kafka message timestamp."""
    live = streams.generate(n, seed=seed, replay_every=10**9)
    # Copies: the generator shares image dicts between records (one event's NewImage is the
    # next one's OldImage), so renaming in place renamed some keys twice and the daemon
    # rejected most of these events (seen: 128k of 161k dead-lettered, none in the lag).
    live = [json.loads(json.dumps(r)) for r in live]
    for r in live:
        r["dynamodb"].pop("ApproximateCreationDateTime", None)
        for image in ("Keys", "NewImage", "OldImage"):
            if image in r["dynamodb"]:
                r["dynamodb"][image]["PK"]["S"] = prefix + r["dynamodb"][image]["PK"]["S"]
    return live


# One measure_lag run. p50/p99 in ms; `parts` is the lag's two parts as text ("before cdcviewd
# p50/p99 A/B ms, inside cdcviewd C/D ms"); `produced` is the producer's summary line, `series`
# the second-by-second figures (produce_paced); metrics0/metrics1 are the daemon's metrics around
# the run.
LagRun = collections.namedtuple(
    "LagRun", "sent took rate p50 p99 parts produced series metrics0 metrics1")


def measure_lag(daemon, kafka, topic, path, rate, seconds, linger_ms):
    """Produces `path` at `rate` for `seconds` to the topic the daemon's "live" source follows,
    waits until it is applied, and returns a LagRun."""
    metrics0 = daemon.metrics()
    sent, took, produced, series = produce_paced(kafka, topic, path, rate, seconds, linger_ms,
                                                 daemon)
    want = {p: str(hw) for p, hw in kafka.high_watermarks(topic).items() if hw > 0}
    wait_positions(daemon, "live", want, timeout=300)
    metrics1 = daemon.metrics()

    def p50_p99(name):
        before, after = histogram(metrics0, name), histogram(metrics1, name)
        return quantile(before, after, 0.5) * 1000, quantile(before, after, 0.99) * 1000

    p50, p99 = p50_p99("cdcview_replication_lag_seconds")
    arrival, delay = p50_p99("cdcview_arrival_lag_seconds"), p50_p99("cdcview_apply_delay_seconds")
    parts = (f"before cdcviewd p50/p99 {arrival[0]:.1f}/{arrival[1]:.1f} ms, "
             f"inside cdcviewd {delay[0]:.1f}/{delay[1]:.1f} ms")
    return LagRun(sent, took, sent / max(took, 1e-9), p50, p99, parts, produced, series,
                  metrics0, metrics1)


def write_records(path, records):
    """Encodes `records` for kafka_produce_bench: <u32 partition><u32 n><key><u32 n><value>."""
    with open(path, "wb") as out:
        for partition, key, value in ddb_messages(records):
            out.write(struct.pack("<II", partition, len(key)) + key +
                      struct.pack("<I", len(value)) + value)


def produce_paced(kafka, topic, path, rate, seconds, linger_ms, daemon):
    """Produces the records of `path` (write_records) at `rate`/s for `seconds` with
    kafka_produce_bench (C++, librdkafka, an absolute schedule).

    Encoded before the clock starts: a pace that counted the encoding would catch up with a
    burst at full speed (seen with the Python producer this replaces: the first 14k events of a
    2k/s run within 0.9 s, their lag up to 1 s). That producer also cost 12 CPU-seconds per
    20 s at 21k/s and starved the daemon on this 2-core machine.

    Meanwhile the daemon's histograms are read once a second, so a tail can be placed in time
    (a start-up burst, a pause, or spread out) and inside cdcviewd in a stage, beside what the
    writer thread did in that second (ran, waited for its core) and the host's steal per core.
    Returns (sent, seconds, the producer's summary line, [one per second: (lag p50, lag p99,
    inside p99, writer queue / write / commit stage p99s, writer ran, writer waited, steal per
    core...), in ms])."""
    producer = subprocess.Popen(
        [os.path.join(BUILD_DIR, "tests", "bench", "kafka_produce_bench"), "--brokers",
         kafka.bootstrap, "--topic", topic, "--input", path, "--rate", str(rate), "--seconds",
         str(seconds), "--linger-ms", str(linger_ms)],
        stdout=subprocess.PIPE, text=True)
    def snapshot():
        m = daemon.metrics()
        return ([histogram(m, "cdcview_replication_lag_seconds"),
                 histogram(m, "cdcview_apply_delay_seconds")] +
                [histogram(m, "cdcview_apply_stage_seconds", stage=stage)
                 for stage in ("queue", "write", "commit")],
                list(writer_thread(daemon.proc.pid)) + steal_per_cpu())

    series, last = [], snapshot()
    while producer.poll() is None:
        time.sleep(1)
        now = snapshot()
        series.append(tuple([quantile(last[0][0], now[0][0], 0.5) * 1000] +
                            [quantile(a, b, 0.99) * 1000 for a, b in zip(last[0], now[0])] +
                            [(b - a) * 1000 for a, b in zip(last[1], now[1])]))
        last = now
    done = producer.stdout.read().strip()
    if producer.returncode != 0:
        raise SystemExit(f"kafka_produce_bench failed ({producer.returncode}): {done}")
    found = re.search(r"produce: (\d+) messages in ([\d.]+) s", done)
    return int(found.group(1)), float(found.group(2)), done, series


def live_fetch(args):
    """The lag phase consumer's fetch settings (cdcviewd's live source and the bare follower).

    librdkafka's defaults (fetch.min.bytes 1, fetch.wait.max.ms 500) have the broker answer a
    waiting fetch as soon as one partition has data, so the producer's batch for six
    partitions comes back in several fetches. Waiting up to 5 ms for 256 KiB brings it in one,
    at less broker CPU. These are not cdcviewd's defaults because an idle source with them
    costs the broker CPU in empty fetches (nothing with the defaults). The figures:
    docs/PERFORMANCE.md, "Comparisons behind design choices"."""
    if args.live_fetch_wait_ms <= 0:
        return {}
    return {"fetch.wait.max.ms": str(args.live_fetch_wait_ms), "fetch.min.bytes": "262144"}


def cpu_layout(choice):
    """(cdcviewd's cores, everything else's) as taskset lists for --cpus, or (None, None)."""
    cpus = sorted(os.sched_getaffinity(0))
    if choice == "shared" or len(cpus) < 2:
        return None, None
    half = len(cpus) // 2
    return ",".join(map(str, cpus[half:])), ",".join(map(str, cpus[:half]))


def pinned(cpus):
    """A command prefix that runs the command on `cpus` (taskset execs it: the same pid)."""
    return ["taskset", "-c", cpus] if cpus else []


def kafka_alone(kafka, path, rate, args, broker_pid):
    """The Kafka part of the lag on its own: the same records at the same rate to a fresh topic
    that only kafka_consume_bench --follow reads (receive time - message timestamp), cdcviewd
    stopped. Returns its summary line, with the broker JVM's and the machine's CPU seconds."""
    topic = kafka.topic("bench-alone")
    broker0, machine0 = process_cpu(broker_pid), machine_cpu()
    follower = subprocess.Popen(
        pinned(args.daemon_cpus) +
        [os.path.join(BUILD_DIR, "tests", "bench", "kafka_consume_bench"), "--brokers",
         kafka.bootstrap, "--topic", topic, "--follow", str(args.lag_seconds + 3)]
        + [f"--property={name}={value}" for name, value in live_fetch(args).items()],
        stdout=subprocess.PIPE, text=True)
    time.sleep(1)  # assigned at the end offsets before the first record
    subprocess.run([os.path.join(BUILD_DIR, "tests", "bench", "kafka_produce_bench"),
                    "--brokers", kafka.bootstrap, "--topic", topic, "--input", path, "--rate",
                    str(rate), "--seconds", str(args.lag_seconds), "--linger-ms",
                    str(args.linger_ms)], stdout=subprocess.DEVNULL, check=True)
    out = follower.communicate()[0].strip()
    broker1 = process_cpu(broker_pid)
    out += (f"; CPU seconds: broker JVM {'-' if broker1 is None else f'{broker1 - broker0:.1f}'}, "
            f"whole machine {machine_cpu() - machine0:.1f}")
    log(f"Kafka alone at {rate:.0f}/s (producer -> broker -> a bare consumer, no cdcviewd): {out}")
    return out


def thread_times(pid):
    """{tid: (name, cpu s, run-queue wait s, involuntary switches)} of process `pid`'s threads
    ({} once it has ended).

    CPU and the time spent runnable but not running from /proc/<pid>/task/<tid>/schedstat: a
    thread that neither ran nor waited for a CPU was asleep (for the writer: waiting on an
    empty queue)."""
    out = {}
    base = f"/proc/{pid}/task"
    try:
        tids = os.listdir(base)
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            with open(f"{base}/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"{base}/{tid}/schedstat") as f:
                run_ns, wait_ns, _ = f.read().split()
            with open(f"{base}/{tid}/status") as f:
                invol = next(int(line.split()[1]) for line in f
                             if line.startswith("nonvoluntary_ctxt_switches"))
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            continue  # the thread ended
        out[tid] = (name, int(run_ns) / 1e9, int(wait_ns) / 1e9, invol)
    return out


def process_cpu(pid):
    """CPU seconds (user + system) of process `pid` and its reaped children, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError, TypeError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def steal_per_cpu():
    """[steal seconds of cpu0, cpu1, ...] from /proc/stat: time the host ran something else
    while the guest wanted the vCPU (0 where the hypervisor does not report it)."""
    out = []
    with open("/proc/stat") as f:
        for line in f:
            name, *values = line.split()
            if name.startswith("cpu") and name != "cpu":
                out.append(int(values[7]) / os.sysconf("SC_CLK_TCK"))
    return out


def writer_thread(pid):
    """(run s, run-queue wait s) of cdcviewd's writer thread; (0, 0) when it is not found."""
    for name, cpu, wait, _ in thread_times(pid).values():
        if name == "cdcview-writer":
            return cpu, wait
    return 0.0, 0.0


def machine_cpu():
    """Busy CPU seconds of the whole machine (all cores) from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class CpuWindow:
    """CPU use during one phase: cdcviewd per thread (grouped by name), the broker's JVM, this
    process (the producer, when there is one), everything else on the machine; the load average."""

    def __init__(self, daemon_pid, broker_pid, perf_name=None):
        self.daemon_pid, self.broker_pid = daemon_pid, broker_pid
        self.perf = None
        perf_dir = os.environ.get("KAFKA_BENCH_PERF")
        if perf_dir and perf_name:  # a call-graph profile of cdcviewd over the phase
            os.makedirs(perf_dir, exist_ok=True)
            self.perf = subprocess.Popen(
                # DWARF stacks: Debian's LMDB and libc keep no frame pointers, so -g stops
                # at their frames and leaves LMDB's time without a caller.
                ["perf", "record", "--call-graph", "dwarf,32768", "-F", "199", "-p",
                 str(daemon_pid), "-o", os.path.join(perf_dir, f"{perf_name}.data")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.threads = thread_times(daemon_pid)
        self.daemon = process_cpu(daemon_pid)
        self.broker = process_cpu(broker_pid)
        self.me = process_cpu(os.getpid())
        self.machine = machine_cpu()
        self.start = time.monotonic()

    def report(self, label, batch_sizes=None, stages=None):
        wall = time.monotonic() - self.start
        if self.perf is not None:
            self.perf.send_signal(signal.SIGINT)
            self.perf.wait()
        threads = thread_times(self.daemon_pid)
        broker, me, machine = (process_cpu(self.broker_pid), process_cpu(os.getpid()),
                               machine_cpu())
        groups = {}
        for tid, (name, cpu, wait, invol) in threads.items():
            name0, cpu0, wait0, invol0 = self.threads.get(tid, (name, 0, 0, 0))
            g = groups.setdefault(re.sub(r"\d+$", "#", name), [0, 0.0, 0.0, 0])
            g[0] += 1
            g[1] += cpu - cpu0
            g[2] += wait - wait0
            g[3] += invol - invol0
        daemon = process_cpu(self.daemon_pid) - self.daemon
        # A thread that ended (the file source's reader at the end of its file) leaves its
        # CPU in the process's total only.
        exited = daemon - sum(g[1] for g in groups.values())
        if exited >= 0.05:
            groups["(ended threads)"] = [0, exited, 0.0, 0]
        log(f"{label}: {wall:.1f}s wall, load average {os.getloadavg()[0]:.2f}; CPU seconds: "
            f"cdcviewd {daemon:.1f}, broker JVM "
            f"{'-' if broker is None else f'{broker - self.broker:.1f}'}, bench (python, with "
            f"the producer it ran) {me - self.me:.1f}, whole machine {machine - self.machine:.1f} "
            f"(of {wall * os.cpu_count():.1f})")
        for name, (n, cpu, wait, invol) in sorted(groups.items(), key=lambda g: -g[1][1]):
            if cpu < 0.05 and wait < 0.05:
                continue
            log(f"  {name:<16} x{n}: cpu {cpu:6.2f}s ({100 * cpu / wall:3.0f}% of wall), "
                f"waiting for a CPU {wait:5.2f}s, asleep {max(0.0, n * wall - cpu - wait):6.2f}s, "
                f"{invol} preemptions" if n else f"  {name:<16}   : cpu {cpu:6.2f}s")
        if batch_sizes:
            log(f"  batches: {batch_sizes}")
        if stages:
            log(f"  writer stages, {stages}")


def batch_sizes(before, after):
    """'<n> commits, mean <m> events, <k> over <batch_size>' between two metric snapshots. The
    last: backlog batches (the writer found more than apply.batch_size waiting and took up to 8
    times as many), a sign that it fell behind for a while."""
    limit = float(apply_section().get("apply", {}).get("batch_size", 1024))  # the default
    def get(metrics, suffix):
        return metrics.get((f"cdcview_apply_batch_size_{suffix}", frozenset()), 0.0)
    n = get(after, "count") - get(before, "count")
    total = get(after, "sum") - get(before, "sum")
    b0, b1 = (histogram(m, "cdcview_apply_batch_size") for m in (before, after))
    # The histogram's bounds are powers of two: a batch size between them counts from the next.
    bound = min((b for b in b1 if b >= limit), default=float("inf"))
    over = n - (b1.get(bound, 0.0) - b0.get(bound, 0.0))
    return f"{n:.0f} commits, mean {total / n if n else 0:.0f} events, {over:.0f} over {bound:.0f}"


def writer_stages(before, after):
    """'queue p50/p99 a/b ms, prepare ..., commit ...' between two metric snapshots: where the
    committed batches' time went (cdcview_apply_stage_seconds)."""
    parts = []
    for stage in ("queue", "prepare", "handoff", "write", "commit"):
        b0, b1 = (histogram(m, "cdcview_apply_stage_seconds", stage=stage) for m in (before, after))
        parts.append(f"{stage} {1e3 * quantile(b0, b1, 0.5):.1f}/{1e3 * quantile(b0, b1, 0.99):.1f}")
    return "p50/p99 ms: " + ", ".join(parts)


def touch_memory(work, gib=4):
    """Writes `gib` GiB to a file under `work` and deletes it, where that is tmpfs.

    On this VM the first round of each run was the slowest for both sources (up to 24% more
    CPU per event in the first Kafka round than in the second): a guest page's first use
    costs the host a fault, and the stores of the bulk phases are gigabytes of fresh memory.
    This gives every round memory that was used before."""
    if filesystem(work) != "tmpfs":
        return
    t = time.monotonic()
    path = os.path.join(work, "touch-memory")
    chunk = b"\0" * (64 << 20)
    with open(path, "wb") as f:
        for _ in range(gib * 16):
            f.write(chunk)
    os.remove(path)
    log(f"wrote and removed {gib} GiB on tmpfs first, in {time.monotonic() - t:.1f}s "
        "(see touch_memory)")


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


def broker_pid(run_dir):
    """The broker's pid when this bench started it (else from KAFKA_BENCH_BROKER_PID)."""
    try:
        with open(os.path.join(run_dir, "kafka.pid")) as f:
            return int(f.read().strip())
    except (FileNotFoundError, ValueError):
        pid = os.environ.get("KAFKA_BENCH_BROKER_PID")
        return int(pid) if pid else None


def start_broker(run_dir):
    """The broker's address: KAFKA_BOOTSTRAP's, or that of one scripts/kafka.sh starts in
    `run_dir` (`scripts/kafka.sh stop <run_dir>` stops it)."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if bootstrap:
        return bootstrap
    started = subprocess.run([SCRIPT, "start", run_dir], capture_output=True, text=True)
    if started.returncode != 0:
        raise SystemExit(f"scripts/kafka.sh start failed:\n{started.stderr}")
    return started.stdout.strip().splitlines()[-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--lag-seconds", type=float, default=20.0)
    parser.add_argument("--tmp", default=None, help="where to create the work directory")
    parser.add_argument("--lag-rate", type=float, default=None,
                        help="events/s for the lag phase (default: half the measured rate)")
    parser.add_argument("--linger-ms", type=float, default=5.0,
                        help="the lag phase producer's linger.ms (inside the measured lag)")
    parser.add_argument("--warm-seconds", type=float, default=10.0,
                        help="the lag phase's pace for this long first, not measured (JIT)")
    parser.add_argument("--live-fetch-wait-ms", type=int, default=5,
                        help="the lag phase consumer's fetch.wait.max.ms, with fetch.min.bytes "
                             "256 KiB (0: librdkafka's defaults, 500 ms and 1 byte)")
    parser.add_argument("--lag-sweep", type=lambda text: [float(f) for f in text.split(",") if f],
                        default=[0.1, 0.2, 0.3],
                        help="after the half-load phase, the lag at these fractions of the bulk "
                             "rate, comma-separated ('' for none)")
    parser.add_argument("--sweep-seconds", type=float, default=10.0,
                        help="how long each --lag-sweep rate is produced")
    parser.add_argument("--kafka-alone", action="store_true",
                        help="after the lag phase, the same load with a bare consumer instead "
                             "of cdcviewd: the Kafka part of the lag (20 s more)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="how many times the Kafka and the file bulk phases run each, in "
                             "the order K F F K (see above)")
    parser.add_argument("--cpus", choices=("split", "shared"), default="split",
                        help="split: cdcviewd on the upper half of the cores, the broker and "
                             "the producer on the lower half; shared: all on all (see above)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    args.daemon_cpus, args.other_cpus = cpu_layout(args.cpus)
    if args.other_cpus:  # the producers this script starts inherit it
        os.sched_setaffinity(0, {int(c) for c in args.other_cpus.split(",")})
        log(f"cores: cdcviewd and the bare consumers on {args.daemon_cpus}, the broker, the "
            f"producer and this script on {args.other_cpus} (--cpus shared: all on all)")
    work = tempfile.mkdtemp(prefix="cdcview-kafka-bench.", dir=args.tmp)
    run_dir = os.path.join(work, "kafka")
    bootstrap = start_broker(run_dir)
    if os.environ.get("KAFKA_BOOTSTRAP") and args.other_cpus and broker_pid(run_dir):
        # a broker of one's own: all its threads
        subprocess.run(["taskset", "-a", "-p", "-c", args.other_cpus, str(broker_pid(run_dir))],
                       stdout=subprocess.DEVNULL, check=True)
    try:
        run(Kafka(bootstrap), work, args, broker_pid(run_dir))
    finally:
        if not os.environ.get("KAFKA_BOOTSTRAP"):
            subprocess.run([SCRIPT, "stop", run_dir], capture_output=True, text=True)
        keep = os.environ.get("KAFKA_BENCH_LOGS")
        if keep:  # the daemons' logs outlive the work directory
            os.makedirs(keep, exist_ok=True)
            for name in glob.glob(os.path.join(work, "*-daemon-*", "*.log")):
                daemon = os.path.basename(os.path.dirname(name))
                shutil.copy(name, os.path.join(keep, f"{daemon}.{os.path.basename(name)}"))
        shutil.rmtree(work, ignore_errors=True)  # on tmpfs it would hold gigabytes of memory


def apply_section():
    """KAFKA_BENCH_APPLY (JSON) as the daemons' apply section, or nothing (the defaults)."""
    apply = json.loads(os.environ.get("KAFKA_BENCH_APPLY", "{}"))
    return {"apply": apply} if apply else {}


def file_phase(work, path, table, storage, stubs, args, broker_pid, round_):
    """cdcviewd applying the same events from a file (the storage ceiling), on an empty store:
    returns the seconds from its first applied batch to its last."""
    home = os.path.join(work, f"file-daemon-{round_}")
    os.makedirs(home)
    f = Daemon(home, config={
        "sources": [{"name": "file", "table": "App", "file": {"path": path}}], "tables": [table],
        "storage": dict({"path": os.path.join(home, "store"), "map_size": "2GiB"}, **storage),
        **apply_section()}, stubs=stubs, prefix=pinned(args.daemon_cpus))
    # Before the start: reading the whole file takes this script seconds, and the first stored
    # position seen after them would leave the events applied meanwhile out of the time (it
    # made the file source's rate 9-16% too high, every ratio to it 8-14% too low).
    want = {"": expected_position(path)}
    try:
        f.start()
        window, metrics0 = CpuWindow(f.proc.pid, broker_pid, f"file-{round_}"), f.metrics()
        first, done = wait_positions(f, "file", want)
        metrics1 = f.metrics()
        window.report(f"cdcviewd (file), round {round_}", batch_sizes(metrics0, metrics1),
                      writer_stages(metrics0, metrics1))
        f.stop()
    finally:
        f.ensure_dead()
    log(f"cdcviewd (file), round {round_}: applied {args.events} events in {done - first:.1f}s = "
        f"{args.events / (done - first):.0f} events/s")
    # Its store is not needed any more; on tmpfs it holds about a gigabyte of memory.
    shutil.rmtree(os.path.join(home, "store"), ignore_errors=True)
    return done - first


def run(kafka, work, args, broker_pid):
    os.makedirs(os.path.join(work, "stubs"))
    stubs = make_stubs(os.path.join(work, "stubs"))
    log(f"generating {args.events} events")
    records = streams.generate(args.events, seed=1, replay_every=10**9)
    topic, lag_topic = kafka.topic("bench"), kafka.topic("bench-lag")
    t = time.monotonic()
    kafka.produce(topic, ddb_messages(records))
    log(f"produced {len(records)} events to {topic} in {time.monotonic() - t:.1f}s")
    events_path = os.path.join(work, "events.ndjson")  # the same events for the file source
    streams.write(events_path, records)
    want = {p: str(hw) for p, hw in kafka.high_watermarks(topic).items() if hw > 0}

    broker0, machine0, t0 = process_cpu(broker_pid), machine_cpu(), time.monotonic()
    raw = subprocess.run(pinned(args.daemon_cpus) +
                         [os.path.join(BUILD_DIR, "tests", "bench", "kafka_consume_bench"),
                          "--brokers", kafka.bootstrap, "--topic", topic],
                         capture_output=True, text=True, check=True).stdout.strip()
    raw_rate = float(re.search(r"= (\d+) msg/s", raw).group(1))
    log(raw)
    broker1 = process_cpu(broker_pid)
    log(f"raw consume: {time.monotonic() - t0:.1f}s wall (with start-up), load average "
        f"{os.getloadavg()[0]:.2f}; CPU seconds: broker JVM "
        f"{'-' if broker1 is None else f'{broker1 - broker0:.1f}'}, whole machine "
        f"{machine_cpu() - machine0:.1f}")

    table = ref.EXAMPLE_TABLE
    props = dict({"heartbeat.interval.ms": "300", "session.timeout.ms": "6000"},
                 **json.loads(os.environ.get("KAFKA_BENCH_PROPERTIES", "{}")))
    bulk = {"name": "bulk", "table": "App",
            "kafka": {"brokers": kafka.bootstrap, "topics": [topic], "group": f"bench-{topic}",
                      "properties": props}}
    live_source = {"name": "live", "table": "App",
                   "kafka": {"brokers": kafka.bootstrap, "topics": [lag_topic], "start": "latest",
                             "group": f"bench-{lag_topic}",
                             "properties": dict(live_fetch(args), **props)}}
    storage = json.loads(os.environ.get("KAFKA_BENCH_STORAGE", "{}"))

    def kafka_round(round_):
        """cdcviewd consuming the topic into an empty store (a group of its own): the daemon,
        stopped, and the seconds from its first applied batch to its last."""
        home = os.path.join(work, f"kafka-daemon-{round_}")
        os.makedirs(home)
        source = dict(bulk, kafka=dict(bulk["kafka"], group=f"bench-{topic}-{round_}"))
        daemon_storage = dict({"path": os.path.join(home, "store"), "map_size": "2GiB"},
                              **storage)
        daemon = Daemon(home, config={"sources": [source], "tables": [table],
                                      "storage": daemon_storage, **apply_section()},
                        stubs=stubs, prefix=pinned(args.daemon_cpus))
        try:
            daemon.start()
            window, metrics0 = (CpuWindow(daemon.proc.pid, broker_pid, f"kafka-{round_}"),
                                daemon.metrics())
            first, done = wait_positions(daemon, "bulk", want)
            metrics1 = daemon.metrics()
            window.report(f"cdcviewd (kafka) bulk phase, round {round_}",
                          batch_sizes(metrics0, metrics1), writer_stages(metrics0, metrics1))
            daemon.stop()
        finally:
            daemon.ensure_dead()
        log(f"cdcviewd (kafka), round {round_}: applied {args.events} events in "
            f"{done - first:.1f}s = {args.events / (done - first):.0f} events/s")
        return daemon, source, daemon_storage, done - first

    touch_memory(work)
    # Kafka, file, file, Kafka, ...: see the docstring.
    kafka_seconds, file_seconds, d = [], [], None
    for round_ in range(args.rounds):
        for phase in ("kafka", "file") if round_ % 2 == 0 else ("file", "kafka"):
            if phase == "file":
                file_seconds.append(file_phase(work, events_path, table, storage, stubs, args,
                                               broker_pid, round_))
                continue
            d, bulk_source, kafka_storage, seconds = kafka_round(round_)
            kafka_seconds.append(seconds)
            if round_ < args.rounds - 1:  # only the last round's store goes on to the lag phase
                shutil.rmtree(d.store, ignore_errors=True)
    kafka_rate = args.events * len(kafka_seconds) / sum(kafka_seconds)
    file_rate = args.events * len(file_seconds) / sum(file_seconds)
    log(f"bulk phases: cdcviewd (kafka) {kafka_rate:.0f} events/s, the file source "
        f"{file_rate:.0f} events/s, over {args.rounds} round(s) each")
    try:
        # The live source joins now, on the same store: an idle source with its short fetch
        # wait would have cost the broker CPU during the bulk phase (see live_fetch).
        d.write_config({"sources": [bulk_source, live_source], "tables": [table],
                        "storage": kafka_storage, **apply_section()})
        d.start()

        # How steady the daemon's core is (the daemon idle): a p99 in milliseconds is measured
        # on top of this machine's own stalls.
        jitter = subprocess.run(
            pinned(args.daemon_cpus) + [os.path.join(BUILD_DIR, "tests", "bench",
                                                     "cpu_jitter_bench")],
            capture_output=True, text=True, check=True).stdout.strip().splitlines()
        where = "cdcviewd's core" if args.daemon_cpus else "any core (--cpus shared)"
        for line in jitter:
            log(f"{where}, {line}")

        # Replication lag at half the rate cdcviewd sustained.
        lag_rate = args.lag_rate or kafka_rate / 2
        warm = int(lag_rate * args.warm_seconds)
        live = live_records(warm + int(lag_rate * args.lag_seconds * 1.1) + 1000, seed=2,
                            prefix="LIVE")
        # The first events at the lag phase's pace are a warm-up, not measured: the bulk phases
        # ran the broker's JVM on large batches only, and compiling the code paths of many
        # small produce and fetch requests then took its C2 compiler 4.7 CPU-s and its request
        # threads 5.0 (against 2-3 warm) in 10 s of the measured phase, starving the daemon
        # (lag p50 1.4 s, p99 2.5 s in that run). A broker in service is warm.
        warm_path, path = (os.path.join(work, "warm-records.bin"),
                           os.path.join(work, "lag-records.bin"))
        write_records(warm_path, live[:warm])
        write_records(path, live[warm:])
        if warm:
            warmed = produce_paced(kafka, lag_topic, warm_path, lag_rate, args.warm_seconds,
                                   args.linger_ms, d)[0]
            wait_positions(d, "live", {p: str(hw) for p, hw in
                                       kafka.high_watermarks(lag_topic).items() if hw > 0},
                           timeout=300)
            log(f"warm-up: {warmed} events at {lag_rate:.0f}/s for {args.warm_seconds:.0f}s, "
                "applied; not measured")
        time.sleep(2)
        window = CpuWindow(d.proc.pid, broker_pid, "lag")
        half = measure_lag(d, kafka, lag_topic, path, lag_rate, args.lag_seconds, args.linger_ms)
        metrics0, metrics1 = half.metrics0, half.metrics1
        log(half.produced)
        log("second by second, ms: lag p50/p99 (inside p99; writer stage p99s: queue, write, "
            "commit; the writer thread ran / waited for its core; steal per core): " +
            " ".join(f"{p50:.0f}/{p99:.0f} ({inside:.0f}; {queue:.1f} {write:.1f} {commit:.1f}; "
                     f"{ran:.0f}/{waited:.0f}; {'/'.join(f'{v:.0f}' for v in steal)})"
                     for p50, p99, inside, queue, write, commit, ran, waited, *steal
                     in half.series))
        window.report("cdcviewd (kafka) lag phase", batch_sizes(metrics0, metrics1),
                      writer_stages(metrics0, metrics1))
        outcomes = {dict(labels)["result"]: value - metrics0.get((name, labels), 0.0)
                    for (name, labels), value in metrics1.items()
                    if name == "cdcview_events_total" and dict(labels).get("source") == "live"}
        log(f"lag phase events: {outcomes} (only applied events have a replication lag)")
        before = histogram(metrics0, "cdcview_replication_lag_seconds")
        after = histogram(metrics1, "cdcview_replication_lag_seconds")
        lag_sum = (metrics1.get(("cdcview_replication_lag_seconds_sum", frozenset()), 0.0) -
                   metrics0.get(("cdcview_replication_lag_seconds_sum", frozenset()), 0.0))
        lag_mean = 1000 * lag_sum / max(1.0, after[float("inf")] - before.get(float("inf"), 0))

        # The same at lower loads: up to which rate does the p99 stay under the target on
        # this machine, where producer, broker and daemon share the cores?
        sweep = []
        for i, fraction in enumerate(args.lag_sweep):
            rate = kafka_rate * fraction
            sweep_path = os.path.join(work, f"sweep-{i}.bin")
            write_records(sweep_path, live_records(int(rate * args.sweep_seconds * 1.1) + 1000,
                                                   seed=3 + i, prefix=f"SWEEP{i}#"))
            log(f"lag sweep: {fraction:.0%} of the bulk rate, {rate:.0f}/s for "
                f"{args.sweep_seconds:.0f}s")
            run_at = measure_lag(d, kafka, lag_topic, sweep_path, rate, args.sweep_seconds,
                                 args.linger_ms)
            sweep.append((fraction, run_at))
            log(f"lag sweep: {run_at.produced}; p50 {run_at.p50:.1f} ms, p99 {run_at.p99:.1f} ms")
        d.stop()
    finally:
        d.ensure_dead()
    alone = kafka_alone(kafka, path, lag_rate, args, broker_pid) if args.kafka_alone else None

    bound = min(raw_rate, file_rate)
    print()
    print(f"kafka: stores and broker under {work} ({filesystem(work)})")
    print("kafka: cores: " + (f"cdcviewd and the bare consumers on {args.daemon_cpus}, the "
                              f"broker and the producer on {args.other_cpus}"
                              if args.daemon_cpus else "all processes share all cores"))
    print(f"kafka: cdcviewd consumed+applied {args.events} events, 6 views: {kafka_rate:.0f} events/s "
          f"(over {args.rounds} round(s): " + ", ".join(f"{args.events / t:.0f}" for t in kafka_seconds)
          + ")")
    print(f"kafka: bare librdkafka consume loop, same topic: {raw_rate:.0f} msg/s "
          f"(cdcviewd / raw = {kafka_rate / raw_rate:.2f})")
    print(f"kafka: file source, same events (storage ceiling): {file_rate:.0f} events/s (rounds: "
          + ", ".join(f"{args.events / t:.0f}" for t in file_seconds)
          + f"; cdcviewd / ceiling = {kafka_rate / file_rate:.2f})")
    print(f"kafka: target >= 80% of min(raw, ceiling) = {0.8 * bound:.0f} events/s: "
          f"{'met' if kafka_rate >= 0.8 * bound else 'NOT met'}")
    load = "50% load" if not args.lag_rate else f"{args.lag_rate:.0f}/s requested"
    fetch = live_fetch(args)
    load += (f", fetch.wait.max.ms {fetch['fetch.wait.max.ms']} with fetch.min.bytes "
             f"{fetch['fetch.min.bytes']}" if fetch else ", librdkafka's fetch defaults")
    print(f"kafka: replication lag at {load} ({half.sent} events in {half.took:.1f}s = "
          f"{half.rate:.0f}/s): p50 {half.p50:.1f} ms, p99 {half.p99:.1f} ms, mean "
          f"{lag_mean:.1f} ms (target p99 <= {LAG_TARGET_MS} ms: "
          f"{'met' if half.p99 <= LAG_TARGET_MS else 'NOT met'})")
    print(f"kafka:   its parts: {half.parts}")
    for fraction, at in sweep:
        print(f"kafka: replication lag at {fraction:.0%} of the bulk rate ({at.rate:.0f}/s): "
              f"p50 {at.p50:.1f} ms, p99 {at.p99:.1f} ms; {at.parts}")
    if sweep:
        held = [at.rate for _, at in sweep if at.p99 <= LAG_TARGET_MS]
        print(f"kafka: highest swept rate with p99 <= {LAG_TARGET_MS} ms: " +
              (f"{max(held):.0f}/s ({max(held) / kafka_rate:.0%} of the bulk rate)" if held
               else "none"))
    if alone:
        print(f"kafka: the same load, no cdcviewd (producer -> broker -> bare consumer): {alone}")
    for line in jitter:
        print(f"kafka: {where} before the lag phase, {line}")


if __name__ == "__main__":
    main()
