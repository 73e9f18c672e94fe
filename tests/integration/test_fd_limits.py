"""File descriptors and connections against the real daemon: the soft RLIMIT_NOFILE raised at
start; under `prlimit --nofile=1024` a flood of idle connections on every port is refused past
the main port's cap while ingestion goes on, and every port accepts new connections once it
ends; idle connections on the main port are closed."""

import json
import re
import resource
import shutil
import socket
import subprocess
import time
import urllib.request

import grpc
import pytest

import reference as ref
from conftest import DAEMON_BIN, entry_to_tuple, metric, wait_for

PRLIMIT = shutil.which("prlimit")
pytestmark = pytest.mark.skipif(PRLIMIT is None, reason="needs prlimit (util-linux)")

FLOOD_GRPC = 1100
FLOOD_FAST = 50
FLOOD_METRICS = 20


def config_for(src, dead, **server):
    return {"sources": [{"name": "src", "table": "App",
                         "file": {"path": str(src), "follow": True,
                                  "dead_letter_path": str(dead)}}],
            "tables": [ref.EXAMPLE_TABLE],
            "server": {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0",
                       "fast_reads": "127.0.0.1:0", **server}}


def order(seq, user):
    image = {"PK": {"S": f"USER#{user}"}, "SK": {"S": "ORDER#o1"}, "type": {"S": "order"},
             "status": {"S": "PLACED"}, "created_at": {"S": "2025-03-01T10:00:00Z"},
             "total": {"N": "1"}, "GSI1PK": {"S": "STATUS#PLACED"},
             "GSI1SK": {"S": f"2025-03-01T10:00:00Z#{user}"}}
    return {"eventID": f"{seq:032x}", "eventName": "INSERT", "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "dynamodb": {"ApproximateCreationDateTime": 1740823200,
                         "Keys": {"PK": image["PK"], "SK": image["SK"]}, "NewImage": image,
                         "SequenceNumber": str(seq), "SizeBytes": 100,
                         "StreamViewType": "NEW_IMAGE"}}


def append(path, lines):
    with open(path, "a", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def open_idle(port, count):
    """`count` TCP connections to `port` that never send a byte."""
    socks = []
    for _ in range(count):
        socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    return socks


def new_channel(addr):
    """A channel on a connection of its own: grpcio otherwise shares one per address."""
    return grpc.insecure_channel(addr, options=[("grpc.use_local_subchannel_pool", 1)])


def answers_health(addr, timeout=2):
    with new_channel(addr) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        try:
            return check(b"", timeout=timeout) == b"\x08\x01"
        except grpc.RpcError:
            return False


def answers_scan(d, addr, timeout=2):
    with new_channel(addr) as channel:
        stub = d.stubs.grpc.ViewServiceStub(channel)
        try:
            stub.Scan(d.stubs.vs.ScanRequest(view="GSI1"), timeout=timeout)
            return True
        except grpc.RpcError:
            return False


def answers_metrics(port, timeout=2):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture
def many_fds():
    """Room in this test process for the flood's sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = FLOOD_GRPC + FLOOD_FAST + FLOOD_METRICS + 512
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"needs {want} file descriptors in the test process; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


BUDGET_LINE = re.compile(r"file descriptors: limit (\d+), (\d+) open, server.fd_reserve (\d+): "
                         r"connections may hold (\d+); the gRPC port takes at most (\d+), "
                         r"the fast read port (\d+)")


def closed_by_server(sock):
    """True if the server closed `sock` (EOF or reset); what it sent before is skipped."""
    sock.setblocking(False)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def test_flood_of_idle_connections_under_1024_fds(daemon_factory, tmp_path, many_fds):
    src, dead = tmp_path / "changes.jsonl", tmp_path / "dead" / "letters.jsonl"
    append(src, [order(1, "A")])
    d = daemon_factory(config_for(src, dead),
                       prefix=[PRLIMIT, "--nofile=1024:1024", "--"]).start()
    d.wait_applied("src", 1)
    limit, fds_open, reserve, budget, cap, fast_cap = map(
        int, BUDGET_LINE.search(d.log()).groups())
    assert (limit, reserve) == (1024, 256)
    assert budget == limit - fds_open - reserve and 0 < fds_open < 100
    # server.grpc_max_connections (1000) and fast_reads_max_connections (1024) ask for more than
    # the limit leaves: each port gets its share of the budget.
    assert (cap, fast_cap) == (budget * 1000 // 2024, budget * 1024 // 2024)
    assert FLOOD_FAST < fast_cap

    flood = []
    try:
        grpc_flood = open_idle(d.grpc_port, FLOOD_GRPC)
        flood += grpc_flood
        flood += open_idle(int(d.fast_addr.rsplit(":", 1)[1]), FLOOD_FAST)
        flood += open_idle(d.metrics_port, FLOOD_METRICS)
        time.sleep(1)  # every connection accepted or refused

        # Past the cap (the test's own channel holds one connection) each is closed at once.
        refused_now = sum(closed_by_server(sock) for sock in grpc_flood)
        assert refused_now == FLOOD_GRPC + 1 - cap

        # Ingestion goes on: a good record is applied, a bad one dead-lettered.
        append(src, ["{not json", order(2, "B")])
        d.wait_applied("src", 2)
        s = d.source("src")
        assert (s.events_applied, s.events_rejected) == (2, 1), d.log()[-3000:]
        with open(dead, encoding="utf-8") as f:
            letters = [json.loads(line) for line in f]
        assert [(x["source"], x["record"]) for x in letters] == [("src", "{not json")]
        assert [(pk, sk, item["PK"]) for pk, sk, item in
                map(entry_to_tuple, d.scan("GSI1")[0])] == [
            ({"S": "STATUS#PLACED"}, {"S": "2025-03-01T10:00:00Z#A"}, {"S": "USER#A"}),
            ({"S": "STATUS#PLACED"}, {"S": "2025-03-01T10:00:00Z#B"}, {"S": "USER#B"})]
    finally:
        for sock in flood:
            sock.close()

    wait_for("/metrics to answer a new connection", lambda: answers_metrics(d.metrics_port),
             timeout=10, describe=lambda: d.log()[-3000:])
    wait_for("the flood's connections to be counted closed",
             lambda: metric(d.metrics(), "cdcview_connections_open", port="grpc") == 1,
             timeout=10)
    m = d.metrics()
    assert metric(m, "cdcview_fd_limit") == 1024
    assert metric(m, "cdcview_fd_connection_budget") == budget
    assert metric(m, "cdcview_connections_max", port="grpc") == cap
    assert metric(m, "cdcview_connections_max", port="fast_reads") == fast_cap
    assert metric(m, "cdcview_connections_opened_total", port="grpc") == cap
    assert metric(m, "cdcview_connections_refused_total", port="grpc",
                  reason="max_connections") == FLOOD_GRPC + 1 - cap
    assert metric(m, "cdcview_connections_refused_total", port="grpc", reason="fd_limit") == 0
    assert metric(m, "cdcview_connections_closed_total", port="grpc", reason="ended") == cap - 1

    # Every port answers new connections again within a few seconds.
    wait_for("the main port to answer a new connection's health check",
             lambda: answers_health(d.addr), timeout=10, describe=lambda: d.log()[-3000:])
    wait_for("the fast read port to answer a new connection",
             lambda: answers_scan(d, d.fast_addr), timeout=10, describe=lambda: d.log()[-3000:])
    assert "Too many open files" not in d.log()


def test_the_soft_limit_is_raised_to_the_hard_one(daemon_factory, tmp_path):
    src, dead = tmp_path / "changes.jsonl", tmp_path / "dead.jsonl"
    append(src, [order(1, "A")])
    d = daemon_factory(config_for(src, dead),
                       prefix=[PRLIMIT, "--nofile=1024:4096", "--"]).start()
    with open(f"/proc/{d.proc.pid}/limits", encoding="utf-8") as f:
        line = next(x for x in f if x.startswith("Max open files"))
    assert line.split()[3:5] == ["4096", "4096"]
    assert "info open-files limit (RLIMIT_NOFILE): soft 1024 raised to 4096, hard 4096\n" in d.log()
    assert metric(d.metrics(), "cdcview_fd_limit") == 4096
    limit, fds_open, reserve, budget, cap, fast_cap = map(
        int, BUDGET_LINE.search(d.log()).groups())
    assert (limit, reserve, budget, cap, fast_cap) == (4096, 256, 4096 - fds_open - 256, 1000, 1024)
    assert metric(d.metrics(), "cdcview_connections_max", port="grpc") == 1000


def test_no_descriptor_left_for_connections_is_an_error_at_start(daemon_factory, tmp_path):
    src, dead = tmp_path / "changes.jsonl", tmp_path / "dead.jsonl"
    append(src, [order(1, "A")])
    d = daemon_factory(config_for(src, dead, fd_reserve=1024),
                       prefix=[PRLIMIT, "--nofile=1024:1024", "--"])
    d.runs += 1
    with open(d.log_path, "wb") as log:
        code = subprocess.run(d.prefix + [DAEMON_BIN, "--config", d.config_path], cwd=d.cwd,
                              stdout=log, stderr=subprocess.STDOUT, timeout=60).returncode
    assert code == 1
    assert re.search(r"^cdcviewd: budgeting file descriptors: the open-files limit 1024 leaves no "
                     r"descriptor for connections: \d+ are open and server.fd_reserve keeps "
                     r"1024; raise the limit \(ulimit -n, the container's nofile\) or lower "
                     r"server.fd_reserve$", d.log(), re.M), d.log()


def test_idle_connections_are_closed_and_counted(daemon_factory, tmp_path):
    src, dead = tmp_path / "changes.jsonl", tmp_path / "dead.jsonl"
    append(src, [order(1, "A")])
    d = daemon_factory(config_for(src, dead, grpc_max_connection_idle_seconds=1)).start()
    silent = open_idle(d.grpc_port, 3)  # never send the HTTP/2 preface
    try:
        # Closed by gRPC's idle timer (the test's own channel may be too, between its calls).
        wait_for("the server to close the idle connections",
                 lambda: all(closed_by_server(sock) for sock in silent), timeout=10)
    finally:
        for sock in silent:
            sock.close()
    m = wait_for("the closed connections to be counted",
                 lambda: (lambda m: m if metric(m, "cdcview_connections_closed_total", port="grpc",
                                                reason="ended") >= 3 else None)(d.metrics()),
                 timeout=10)
    assert metric(m, "cdcview_connections_closed_total", port="grpc", reason="ended") == (
        metric(m, "cdcview_connections_opened_total", port="grpc")
        - metric(m, "cdcview_connections_open", port="grpc"))
    assert metric(m, "cdcview_connections_refused_total", port="grpc",
                  reason="max_connections") == 0
    assert d.health_serving()


@pytest.mark.parametrize("strikes", [2, 0])
def test_clients_pinging_too_often_are_cut_off_after_the_strikes(daemon_factory, tmp_path,
                                                                 strikes):
    src, dead = tmp_path / "changes.jsonl", tmp_path / "dead.jsonl"
    append(src, [order(1, "A")])
    # No idle or age limit: only the pings can end the connection.
    d = daemon_factory(config_for(src, dead, grpc_max_connection_idle_seconds=0,
                                  grpc_max_connection_age_seconds=0,
                                  grpc_min_ping_interval_seconds=60,
                                  grpc_max_ping_strikes=strikes)).start()
    d.wait_applied("src", 1)
    before = metric(d.metrics(), "cdcview_connections_closed_total", port="grpc", reason="ended")
    pinger = grpc.insecure_channel(d.addr, options=[
        ("grpc.use_local_subchannel_pool", 1), ("grpc.keepalive_time_ms", 100),
        ("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.max_pings_without_data", 0)])
    def closed():
        return metric(d.metrics(), "cdcview_connections_closed_total", port="grpc",
                      reason="ended") - before

    try:
        check = pinger.unary_unary("/grpc.health.v1.Health/Check")
        assert check(b"", timeout=5) == b"\x08\x01"
        # The client pings about once a second (grpcio's own floor): the third ping past the
        # strikes is answered with GOAWAY too_many_pings.
        if strikes:
            wait_for("the pinging connection to be closed", lambda: closed() == 1, timeout=15)
        else:
            time.sleep(6)
            assert closed() == 0
    finally:
        pinger.close()
