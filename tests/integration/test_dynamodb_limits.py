"""The DynamoDB endpoint (server.dynamodb) against careless and hostile clients on the real
daemon: boto3 reads through it; a body over dynamodb_max_request_bytes is refused naming the
field and the daemon keeps serving; connections past the cap are closed with a
ThrottlingException; a client that sends its request slowly is cut at the request timeout, an
idle one at the idle timeout; requests waiting for a position past dynamodb_max_waits get a
ThrottlingException, and answer ServiceUnavailable at once when the daemon stops (the gRPC
port's UNAVAILABLE); HTTPS with a certificate rotated without a restart; SigV4 against the
tokens file; one I/O thread per CPU the daemon may use unless set, with as many page threads at
a lower priority for the long requests, which are not built once their client has left (after
a wait for a position too) and are throttled once they queued past the request timeout. Each refusal is counted, and the counters
are checked exactly.
"""

import base64
import http.client
import json
import os
import re
import socket
import ssl
import threading
import time
import urllib.request

import boto3
import grpc
import botocore
import pytest
from botocore.config import Config as BotoConfig

from conftest import dashboard_metric_names, expected_position, metric, parse_metrics, wait_for
from test_fast_reads_limits import position_token, record
from test_tls import mount_secret
from tls_certs import SERVER2_SERIAL, SERVER_SERIAL, serial_of

PORT_LINE = re.compile(r"serving the DynamoDB API \((HTTPS?)\) on port (\d+)")
READER_TOKEN = "reader-token-0123456789"
METRICS_TOKEN = "metrics-token-0123456789"
TOKENS_YAML = f"""
tokens:
  - {{ name: reader, token: "{READER_TOKEN}", views: [ByDay] }}
  - {{ name: prometheus, token: "{METRICS_TOKEN}", views: [], metrics: true }}
"""
MISMATCH = ("The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method. Consult the service "
            "documentation for details.")


def config(tmp_path, records=None, views=(), **server):
    """The daemon's config, its stream holding `records` (three short items unless given), App's
    views ByDay, ByPk and `views`."""
    stream = str(tmp_path / "a.ndjson")
    with open(stream, "w") as f:
        f.write("".join(records or [record(n, f"I{n}", "D1") for n in range(3)]))
    return stream, {
        "storage": {"path": str(tmp_path / "store"), "map_size": "64MiB"},
        "server": {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0", "dynamodb": "127.0.0.1:0",
                   **server},
        "sources": [{"name": "app", "table": "App", "file": {"path": stream, "follow": True}}],
        "tables": [{"name": "App", "key": {"partition": "PK"},
                    "views": [{"name": "ByDay",
                               "partition_key": {"attribute": "day", "type": "S"}},
                              {"name": "ByPk", "partition_key": {"attribute": "PK", "type": "S"}},
                              *views]}],
    }


def start(daemon_factory, tmp_path, records=None, views=(), **server):
    """A plaintext daemon with the endpoint and `server`'s fields, its records applied."""
    stream, cfg = config(tmp_path, records, views, **server)
    d = daemon_factory(cfg).start()
    d.dynamodb_port = int(PORT_LINE.search(d.log()).group(2))
    wait_for("the records to apply", lambda: d.positions("app").get("") == expected_position(stream))
    return d


def threads_named(d, name):
    """The nice values of the daemon's threads called `name`."""
    tasks = f"/proc/{d.proc.pid}/task"
    nice = []
    for tid in os.listdir(tasks):
        try:
            with open(f"{tasks}/{tid}/comm", encoding="utf-8") as f:
                if f.read().strip() != name:
                    continue
            with open(f"{tasks}/{tid}/stat", encoding="utf-8") as f:
                nice.append(int(f.read().rsplit(")", 1)[1].split()[16]))
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return nice


def dynamodb(d, scheme="http", key="AKID", secret="any-secret", **kwargs):
    return boto3.client("dynamodb", endpoint_url=f"{scheme}://localhost:{d.dynamodb_port}",
                        region_name="eu-west-1", aws_access_key_id=key,
                        aws_secret_access_key=secret,
                        config=BotoConfig(retries={"total_max_attempts": 1}, **kwargs.pop("boto", {})),
                        **kwargs)


def raw(d):
    return socket.create_connection(("127.0.0.1", d.dynamodb_port), timeout=10)


def read_to_close(sock, timeout=10):
    sock.settimeout(timeout)
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def quietly(read):
    """`read`'s result, or None while it fails (the views are still being built)."""
    try:
        return read()
    except botocore.exceptions.ClientError:
        return None


def error_of(call):
    with pytest.raises(botocore.exceptions.ClientError) as err:
        call()
    e = err.value.response
    return e["ResponseMetadata"]["HTTPStatusCode"], e["Error"]["Code"], e["Error"]["Message"]


def rpc_error(call):
    """The grpc.RpcError `call` raises (None if it answers)."""
    try:
        call()
    except grpc.RpcError as e:
        return e
    return None


def day_query(client, view="ByDay"):
    key = "day" if view == "ByDay" else "PK"
    return client.query(TableName="App", IndexName=view, KeyConditionExpression="#k = :v",
                        ExpressionAttributeNames={"#k": key},
                        ExpressionAttributeValues={":v": {"S": "D1" if view == "ByDay" else "I1"}})


def test_boto3_reads_and_oversized_bodies_are_refused_naming_the_field(daemon_factory, tmp_path):
    d = start(daemon_factory, tmp_path, dynamodb_max_request_bytes=2048)
    client = dynamodb(d)
    got = client.get_item(TableName="App", Key={"PK": {"S": "I1"}})
    assert got["Item"] == {"PK": {"S": "I1"}, "day": {"S": "D1"}}
    headers = got["ResponseMetadata"]["HTTPHeaders"]
    assert base64.b64decode(headers["x-cdcview-applied-position"])[:3] == b"cp\x01"
    assert len(headers["x-amzn-requestid"]) == 52
    query = day_query(client)
    assert (query["Count"], query["ScannedCount"]) == (3, 3)
    assert sorted(i["PK"]["S"] for i in query["Items"]) == ["I0", "I1", "I2"]

    big = " OR ".join(f"#k = :v{n}" for n in range(200))
    assert error_of(lambda: client.query(
        TableName="App", IndexName="ByDay", KeyConditionExpression="#k = :v", FilterExpression=big,
        ExpressionAttributeNames={"#k": "day"},
        ExpressionAttributeValues={":v": {"S": "D1"}, **{f":v{n}": {"S": "x"} for n in range(200)}})) == (
        413, "ValidationException",
        "the request body is larger than 2048 bytes (server.dynamodb_max_request_bytes)")
    # The daemon goes on serving, on a new connection.
    assert dynamodb(d).get_item(TableName="App", Key={"PK": {"S": "I2"}})["Item"]["PK"] == {"S": "I2"}
    m = d.metrics()
    assert metric(m, "cdcview_requests_refused_total", port="dynamodb", reason="body_limit") == 1
    assert metric(m, "cdcview_dynamodb_api_requests_total", operation="Query",
                  outcome="ValidationException") == 1
    assert metric(m, "cdcview_dynamodb_api_requests_total", operation="GetItem", outcome="ok") == 2
    assert metric(m, "cdcview_dynamodb_api_requests_total", operation="Query", outcome="ok") == 1
    assert metric(m, "cdcview_dynamodb_api_request_duration_seconds_count", operation="GetItem") == 2
    # Every endpoint metric a dashboard panel or alert names is in the real output.
    api_metrics = dashboard_metric_names("cdcview_dynamodb_api_")
    assert api_metrics == ["cdcview_dynamodb_api_build_wait_seconds_count",
                           "cdcview_dynamodb_api_moved_total",
                           "cdcview_dynamodb_api_request_duration_seconds_bucket",
                           "cdcview_dynamodb_api_requests_total"]
    assert [n for n in api_metrics if n not in {name for name, _ in m}] == []
    d.stop()


def test_connections_past_the_cap_are_closed_with_throttling(daemon_factory, tmp_path):
    d = start(daemon_factory, tmp_path, dynamodb_max_connections=2)
    held = [raw(d), raw(d)]
    for s in held:  # both accepted and served
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).endswith(b"\r\n\r\nhealthy: cdcview")
    third = raw(d)
    answer = read_to_close(third)
    assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer
    assert answer.endswith(
        b'{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"too many '
        b'connections: the DynamoDB endpoint holds at most 2 (server.dynamodb_max_connections); '
        b'retry later"}')
    m = d.metrics()
    assert metric(m, "cdcview_connections_refused_total", port="dynamodb", reason="max_connections") == 1
    assert metric(m, "cdcview_connections_open", port="dynamodb") == 2
    assert metric(m, "cdcview_connections_max", port="dynamodb") == 2
    held[0].close()
    wait_for("the slot freed", lambda: metric(d.metrics(), "cdcview_connections_open", port="dynamodb") == 1)
    assert dynamodb(d).get_item(TableName="App", Key={"PK": {"S": "I0"}})["Item"]["PK"] == {"S": "I0"}
    d.stop()


def test_slow_and_idle_clients_are_cut_off(daemon_factory, tmp_path):
    d = start(daemon_factory, tmp_path, dynamodb_request_timeout_ms=500,
              dynamodb_idle_timeout_ms=1000)
    slow = raw(d)
    t = time.monotonic()
    slow.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: DynamoDB_20120810.GetItem\r\n")
    assert read_to_close(slow) == b""
    assert 0.45 <= time.monotonic() - t < 1.5
    idle = raw(d)
    idle.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert idle.recv(4096).endswith(b"healthy: cdcview")
    t = time.monotonic()
    assert read_to_close(idle) == b""
    assert 0.95 <= time.monotonic() - t < 2.0
    # A close is counted as its session ends, just after the client sees it.
    wait_for("both closes counted", lambda: (
        m := d.metrics(),
        metric(m, "cdcview_connections_closed_total", port="dynamodb", reason="request_timeout"),
        metric(m, "cdcview_connections_closed_total", port="dynamodb", reason="idle"))[1:] == (1, 1))
    assert metric(d.metrics(), "cdcview_connections_opened_total", port="dynamodb") == 2
    d.stop()


def post(d, target, body, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", d.dynamodb_port, timeout=30)
    c.request("POST", "/", body=body, headers={"X-Amz-Target": f"DynamoDB_20120810.{target}",
                                               "Content-Type": "application/x-amz-json-1.0",
                                               **(headers or {})})
    r = c.getresponse()
    return r.status, r.read().decode(), dict(r.getheaders())


def test_waits_past_the_cap_are_throttled_and_do_not_hold_up_other_reads(daemon_factory, tmp_path):
    d = start(daemon_factory, tmp_path, dynamodb_max_waits=1, max_wait_ms=2000)
    get = '{"TableName":"App","Key":{"PK":{"S":"I1"}}}'
    status, _, headers = post(d, "GetItem", get)
    assert status == 200
    applied = base64.b64decode(headers["x-cdcview-applied-position"])
    assert applied == position_token([("app", "", expected_position(str(tmp_path / "a.ndjson")))])
    far = base64.b64encode(position_token([("app", "", "999999999:1000000")])).decode()
    waiting = {}
    waiter = threading.Thread(target=lambda: waiting.update(
        answer=post(d, "GetItem", get, {"x-cdcview-min-position": far})))
    t = time.monotonic()
    waiter.start()
    time.sleep(0.3)
    status, body, _ = post(d, "GetItem", get, {"x-cdcview-min-position": far})
    assert (status, body) == (400, '{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException",'
                                   '"message":"too many requests with a consistency header at once: 1 '
                                   'are running (server.dynamodb_max_waits); retry later"}')
    # A read without a consistency header is answered meanwhile.
    assert post(d, "GetItem", get)[0] == 200
    waiter.join()
    assert 2.0 <= time.monotonic() - t < 3.5
    assert waiting["answer"][0] == 400
    assert "PositionNotAppliedException" in waiting["answer"][1]
    # Applied already: answered from the wait threads at once.
    status, _, _ = post(d, "GetItem", get, {"x-cdcview-min-position": base64.b64encode(applied).decode()})
    assert status == 200
    m = d.metrics()
    assert metric(m, "cdcview_requests_refused_total", port="dynamodb", reason="max_waits") == 1
    assert metric(m, "cdcview_dynamodb_api_requests_total", operation="GetItem",
                  outcome="ThrottlingException") == 1
    assert metric(m, "cdcview_dynamodb_api_requests_total", operation="GetItem", outcome="ok") == 3
    d.stop()


def test_waits_end_when_the_daemon_stops(daemon_factory, pb, tmp_path):
    """A read waiting for a position its daemon has not applied answers as soon as the daemon
    stops (its writer then applies nothing more), on both ports, instead of holding the drain
    until server.max_wait_ms: the client can retry against another replica."""
    d = start(daemon_factory, tmp_path, max_wait_ms=120000, dynamodb_max_waits=1)
    get = '{"TableName":"App","Key":{"PK":{"S":"I1"}}}'
    applied = expected_position(str(tmp_path / "a.ndjson"))
    far = position_token([("app", "", "999999999:1000000")])
    now = base64.b64encode(position_token([("app", "", applied)])).decode()
    answers = {}
    # A channel of its own: Daemon.stop closes d.stub's before it signals.
    channel = grpc.insecure_channel(d.addr)
    stub = pb.grpc.ViewServiceStub(channel)

    def wait_on_dynamodb():  # again while a probe below holds the one wait place
        while True:
            answer = post(d, "GetItem", get, {"x-cdcview-min-position": base64.b64encode(far).decode()})
            if answer[0] != 400 or "ThrottlingException" not in answer[1]:
                answers["dynamodb"] = answer
                return
            time.sleep(0.05)

    waiters = [
        threading.Thread(target=wait_on_dynamodb),
        threading.Thread(target=lambda: answers.update(grpc=rpc_error(lambda: stub.Query(
            pb.vs.QueryRequest(view="ByDay", partition_key=pb.av.AttributeValue(s="D1"),
                               consistency=pb.vs.ReadConsistency(min_position=far)),
            timeout=None)))),
    ]
    for w in waiters:
        w.start()
    # The DynamoDB waiter holds the one wait place once it waits: a read for what is applied
    # (answered at once otherwise) is throttled then.
    wait_for("the DynamoDB request to wait", lambda: post(
        d, "GetItem", get, {"x-cdcview-min-position": now})[0] == 400)
    time.sleep(0.3)  # and the gRPC one
    assert answers == {}  # both wait
    t = time.monotonic()
    d.stop()
    for w in waiters:
        w.join()
    channel.close()
    assert time.monotonic() - t < 30
    where = f"(source app: applied up to {applied}, waiting for 999999999:1000000)"
    because = ("because cdcviewd is shutting down and applies nothing more; retry against another "
               "replica or after its restart")
    status, body, _ = answers["dynamodb"]
    assert (status, json.loads(body)) == (503, {
        "__type": "com.amazonaws.dynamodb.v20120810#ServiceUnavailable",
        "message": f"table App: consistency cannot be reached here {where} {because}"})
    error = answers["grpc"]
    assert (error.code(), error.details()) == (
        grpc.StatusCode.UNAVAILABLE,
        f"view ByDay: consistency cannot be reached here {where} {because}")


# A Scan of ByDay without Limit (a long request) that answers no item: it evaluates every one
# of the view's items.
EMPTY_PAGE_SCAN = ('{"TableName":"App","IndexName":"ByDay","FilterExpression":"#p = :none",'
                   '"ExpressionAttributeNames":{"#p":"pad"},'
                   '"ExpressionAttributeValues":{":none":{"S":"-"}}}')


def send_scan(d):
    """A connection that has sent EMPTY_PAGE_SCAN and reads nothing."""
    body = EMPTY_PAGE_SCAN.encode()
    s = raw(d)
    s.sendall(b"POST / HTTP/1.1\r\nHost: localhost\r\nX-Amz-Target: DynamoDB_20120810.Scan\r\n"
              b"Content-Type: application/x-amz-json-1.0\r\nContent-Length: %d\r\n\r\n" % len(body)
              + body)
    return s


def test_long_requests_whose_clients_left_or_waited_too_long_are_not_built(daemon_factory, tmp_path):
    """One page thread, Scans that each evaluate 30,000 items: of 30 clients that send one and
    close at once, those whose turn comes after they left are not built (counted as
    client_gone); of 30 that send one and wait for their answers, those queued past
    dynamodb_request_timeout_ms get a ThrottlingException saying how long they waited
    (page_timeout). Every request is counted once."""
    d = start(daemon_factory, tmp_path, [record(n, f"I{n}", "D1") for n in range(30000)],
              dynamodb_threads=1, dynamodb_request_timeout_ms=100)

    def counts():  # Scans built, dropped, throttled; a series appears when first counted
        m = d.metrics()
        return tuple(m.get((name, frozenset(labels.items())), 0) for name, labels in (
            ("cdcview_dynamodb_api_requests_total", {"operation": "Scan", "outcome": "ok"}),
            ("cdcview_requests_refused_total", {"port": "dynamodb", "reason": "client_gone"}),
            ("cdcview_requests_refused_total", {"port": "dynamodb", "reason": "page_timeout"})))

    for s in [send_scan(d) for _ in range(30)]:
        s.close()
    wait_for("the 30 Scans to be built or dropped", lambda: sum(counts()) == 30)
    built, gone, late = counts()
    assert late == 0
    assert gone >= 20, (built, gone)  # they left while the first pages were built

    answers = []
    for s in [send_scan(d) for _ in range(30)]:
        r = http.client.HTTPResponse(s)
        r.begin()
        answers.append((r.status, r.read().decode()))
        s.close()
    throttled = [body for status, body in answers if status == 400]
    assert sorted({status for status, _ in answers}) == [200, 400]
    for body in throttled:
        assert re.fullmatch(
            r'\{"__type":"com\.amazonaws\.dynamodb\.v20120810#ThrottlingException","message":'
            r'"waited \d+ ms for a page thread, longer than server\.dynamodb_request_timeout_ms '
            r'\(100 ms\): long requests arrive faster than they are built; retry later"\}', body), body
    assert counts() == (built + 30 - len(throttled), gone, len(throttled))
    assert {body for status, body in answers if status == 200} == {
        '{"Items":[],"Count":0,"ScannedCount":30000}'}
    # Served as before: a point query, and a long request once the queue is gone.
    assert day_query(dynamodb(d), "ByPk")["Count"] == 1
    assert post(d, "Scan", EMPTY_PAGE_SCAN)[0] == 200
    d.stop()


def test_long_requests_that_wait_are_not_built_for_clients_that_left(daemon_factory, tmp_path):
    """20 clients send a Scan that evaluates 30,000 items and waits for a position not yet
    applied, then close. When the position is applied, no page is built for them (each counted
    as client_gone); a client that stays gets its page."""
    d = start(daemon_factory, tmp_path, [record(n, f"I{n}", "D1") for n in range(30000)],
              dynamodb_threads=1, max_wait_ms=60000)
    stream = str(tmp_path / "a.ndjson")
    offset, line, generation, inode = expected_position(stream).split(":")
    later = record(30000, "I30000", "D1")
    after = f"{int(offset) + len(later)}:{int(line) + 1}:{generation}:{inode}"
    token = base64.b64encode(position_token([("app", "", after)])).decode()

    def counts():  # Scans answered, dropped
        m = d.metrics()
        return tuple(m.get((name, frozenset(labels.items())), 0) for name, labels in (
            ("cdcview_dynamodb_api_requests_total", {"operation": "Scan", "outcome": "ok"}),
            ("cdcview_requests_refused_total", {"port": "dynamodb", "reason": "client_gone"})))

    body = EMPTY_PAGE_SCAN.encode()
    head = (b"POST / HTTP/1.1\r\nHost: localhost\r\nX-Amz-Target: DynamoDB_20120810.Scan\r\n"
            b"Content-Type: application/x-amz-json-1.0\r\nx-cdcview-min-position: %s\r\n"
            b"Content-Length: %d\r\n\r\n" % (token.encode(), len(body)))
    waiting = []
    for _ in range(20):
        s = raw(d)
        s.sendall(head + body)
        waiting.append(s)
    wait_for("the 20 Scans to wait", lambda: len(threads_named(d, "dynamodb-pgwait")) == 20)
    for s in waiting:
        s.close()
    stays = {}
    stayer = threading.Thread(target=lambda: stays.update(
        answer=post(d, "Scan", EMPTY_PAGE_SCAN, {"x-cdcview-min-position": token})))
    stayer.start()
    time.sleep(0.3)
    with open(stream, "a") as f:
        f.write(later)
    stayer.join()
    assert stays["answer"][:2] == (200, '{"Items":[],"Count":0,"ScannedCount":30001}')
    wait_for("the 20 Scans to be dropped", lambda: counts() == (1, 20))
    d.stop()


def test_a_short_query_of_large_items_moves_to_a_page_thread(daemon_factory, tmp_path):
    """A Query with a small Limit is answered on an I/O thread while it reads at most 64 KiB of
    index items and merges at most 16 shards; one that needs more runs again on a page thread,
    with the same answer, counted in cdcview_dynamodb_api_moved_total."""
    records = [json.dumps({
        "eventID": f"e{n}", "eventName": "INSERT",
        "dynamodb": {"ApproximateCreationDateTime": time.time(), "Keys": {"PK": {"S": f"I{n}"}},
                     "NewImage": {"PK": {"S": f"I{n}"}, "day": {"S": "D1"}, "pad": {"S": "x" * 30000},
                                  "wide": {"S": f"W#{n}"}, "narrow": {"S": f"N#{n % 2}"}},
                     "SequenceNumber": str(1000 + n)},
    }) + "\n" for n in range(5)]
    sharded = [{"name": name, "partition_key": {"attribute": name.lower(), "type": "S"},
                "shards": {"count": count, "suffix": "#{shard}"}}
               for name, count in (("Wide", 17), ("Narrow", 16))]
    d = start(daemon_factory, tmp_path, records, sharded)
    client = dynamodb(d)

    def pks(limit, view="ByDay", key="day", value="D1"):
        answer = client.query(TableName="App", IndexName=view, Limit=limit,
                              KeyConditionExpression="#k = :v", ProjectionExpression="PK",
                              ExpressionAttributeNames={"#k": key},
                              ExpressionAttributeValues={":v": {"S": value}})
        return sorted(item["PK"]["S"] for item in answer["Items"])

    def moved():
        return metric(d.metrics(), "cdcview_dynamodb_api_moved_total")

    assert pks(2) == ["I0", "I1"]
    assert moved() == 0
    assert threads_named(d, "dynamodb-page") == []
    assert pks(5) == ["I0", "I1", "I2", "I3", "I4"]
    assert moved() == 1
    assert len(threads_named(d, "dynamodb-page")) == 1
    # Write-sharded views queried by their logical key: 16 shards merge here, 17 move.
    items = {"I0", "I1", "I2", "I3", "I4"}
    narrow = pks(2, "Narrow", "narrow", "N")
    assert len(narrow) == 2 and set(narrow) <= items
    assert moved() == 1
    wide = pks(2, "Wide", "wide", "W")
    assert len(wide) == 2 and set(wide) <= items
    assert moved() == 2
    d.stop()


def peer_serial(d, pki):
    context = ssl.create_default_context(cafile=pki.ca_cert)
    with socket.create_connection(("127.0.0.1", d.dynamodb_port), timeout=10) as s:
        with context.wrap_socket(s, server_hostname="localhost") as tls:
            return serial_of(ssl.DER_cert_to_PEM_cert(tls.getpeercert(binary_form=True)).encode())


def tls_metrics(d, ca, token=None):
    scheme = "https" if token else "http"
    request = urllib.request.Request(f"{scheme}://localhost:{d.metrics_port}/metrics",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    context = ssl.create_default_context(cafile=ca) if token else None
    with urllib.request.urlopen(request, timeout=10, context=context) as r:
        return parse_metrics(r.read().decode())


def start_tls(daemon_factory, tmp_path, server):
    stream, cfg = config(tmp_path, **server)
    d = daemon_factory(cfg).start(wait_serving=False)
    d.dynamodb_port = int(PORT_LINE.search(d.log()).group(2))
    assert PORT_LINE.search(d.log()).group(1) == "HTTPS"
    return d


def test_https_with_a_certificate_rotated_without_a_restart(daemon_factory, pki, tmp_path):
    tls_dir = tmp_path / "tls"
    mount_secret(tls_dir, pki.server_cert, pki.server_key)
    d = start_tls(daemon_factory, tmp_path, {"tls_cert_file": str(tls_dir / "tls.crt"),
                                             "tls_key_file": str(tls_dir / "tls.key"),
                                             "tls_metrics": False})
    client = dynamodb(d, "https", verify=pki.ca_cert)
    wait_for("the records to apply",
             lambda: (quietly(lambda: day_query(client)) or {}).get("Count") == 3)
    assert peer_serial(d, pki) == SERVER_SERIAL
    kept = http.client.HTTPSConnection("localhost", d.dynamodb_port, timeout=10,
                                       context=ssl.create_default_context(cafile=pki.ca_cert))
    kept.request("GET", "/")
    assert kept.getresponse().read() == b"healthy: cdcview"
    # A plaintext client fails the handshake and is counted.
    plain = raw(d)
    plain.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert not read_to_close(plain).startswith(b"HTTP/1.1")

    mount_secret(tls_dir, pki.server2_cert, pki.server2_key)
    wait_for("the new certificate served", lambda: peer_serial(d, pki) == SERVER2_SERIAL,
             interval=0.2)
    assert len(day_query(dynamodb(d, "https", verify=pki.ca_cert))["Items"]) == 3
    kept.request("GET", "/")  # the connection opened before rotation still serves
    assert kept.getresponse().read() == b"healthy: cdcview"
    m = tls_metrics(d, pki.ca_cert)
    assert metric(m, "cdcview_tls_reloads_total", port="dynamodb", result="ok") == 1
    assert metric(m, "cdcview_connections_closed_total", port="dynamodb", reason="tls_handshake") == 1
    kept.close()
    d.stop()


def test_sigv4_against_the_tokens_file(daemon_factory, pki, tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)
    d = start_tls(daemon_factory, tmp_path, {"tls_cert_file": pki.server_cert,
                                             "tls_key_file": pki.server_key,
                                             "tokens_file": str(tokens)})
    reader = dynamodb(d, "https", key="reader", secret=READER_TOKEN, verify=pki.ca_cert)
    wait_for("the records to apply",
             lambda: (quietly(lambda: day_query(reader)) or {}).get("Count") == 3)
    unsigned = dynamodb(d, "https", verify=pki.ca_cert,
                        boto={"signature_version": botocore.UNSIGNED})
    assert error_of(lambda: day_query(unsigned)) == (
        400, "MissingAuthenticationTokenException", "Request is missing Authentication Token")
    wrong = dynamodb(d, "https", key="reader", secret=READER_TOKEN + "x", verify=pki.ca_cert)
    assert error_of(lambda: day_query(wrong)) == (400, "InvalidSignatureException", MISMATCH)
    unknown = dynamodb(d, "https", key="nobody", secret=READER_TOKEN, verify=pki.ca_cert)
    assert error_of(lambda: day_query(unknown)) == (
        400, "UnrecognizedClientException", "The security token included in the request is invalid.")
    status, code, message = error_of(lambda: day_query(reader, "ByPk"))
    assert (status, code) == (400, "AccessDeniedException")
    assert 'token "reader" may not read view "ByPk"' in message
    # Refused before the request is checked against the view's keys: no key name is told.
    assert error_of(lambda: reader.query(
        TableName="App", IndexName="ByPk", KeyConditionExpression="guess = :v",
        ExpressionAttributeValues={":v": {"S": "x"}})) == (
        400, "AccessDeniedException",
        'token "reader" may not read view "ByPk": add the view to its views in server.tokens_file')
    m = tls_metrics(d, pki.ca_cert, METRICS_TOKEN)
    assert metric(m, "cdcview_auth_refused_total", port="dynamodb", reason="no_token") == 1
    assert metric(m, "cdcview_auth_refused_total", port="dynamodb", reason="bad_token") == 2
    assert metric(m, "cdcview_auth_refused_total", port="dynamodb", reason="view_denied") == 2
    d.stop()


def test_mtls_and_a_handshake_that_never_finishes(daemon_factory, pki, tmp_path):
    d = start_tls(daemon_factory, tmp_path, {"tls_cert_file": pki.server_cert,
                                             "tls_key_file": pki.server_key,
                                             "tls_client_ca_file": pki.ca_cert,
                                             "tls_metrics": False,
                                             "dynamodb_request_timeout_ms": 500})
    # With the CA's client certificate: served.
    with_cert = dynamodb(d, "https", verify=pki.ca_cert,
                         boto={"client_cert": (pki.client_cert, pki.client_key)})
    wait_for("the records to apply",
             lambda: (quietly(lambda: day_query(with_cert)) or {}).get("Count") == 3)
    # Without a certificate, or with another CA's: the handshake fails.
    for cert in (None, (pki.other_client_cert, pki.other_client_key)):
        context = ssl.create_default_context(cafile=pki.ca_cert)
        if cert:
            context.load_cert_chain(*cert)
        with socket.create_connection(("127.0.0.1", d.dynamodb_port), timeout=10) as s:
            with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
                with context.wrap_socket(s, server_hostname="localhost") as tls:
                    tls.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                    assert tls.recv(4096) == b""  # TLS 1.3: the alert comes after the handshake
                    raise ConnectionResetError
    # A client that opens a connection and never says hello is closed at the request timeout.
    silent = raw(d)
    t = time.monotonic()
    assert read_to_close(silent) == b""
    assert 0.45 <= time.monotonic() - t < 1.5
    m = tls_metrics(d, pki.ca_cert)
    assert metric(m, "cdcview_connections_closed_total", port="dynamodb", reason="tls_handshake") == 2
    assert metric(m, "cdcview_connections_closed_total", port="dynamodb", reason="request_timeout") == 1
    d.stop()


def test_io_threads_default_to_the_cpus_the_daemon_may_use(daemon_factory, tmp_path):
    """server.dynamodb_threads 0 (the default) runs one I/O thread per usable CPU: one when
    pinned to one CPU, named at start; a count that is set is kept. Long requests (a Scan
    without Limit) run on page threads 5 steps of nice below the I/O threads, made when first
    needed, as many at most as I/O threads; short ones (GetItem, a Query with Limit 1) make
    none. A long request with a consistency header runs on a page-wait thread at that
    priority."""
    stream, cfg = config(tmp_path)
    pinned = daemon_factory(cfg, name="pinned", prefix=["taskset", "-c", "0"]).start()
    pinned.dynamodb_port = int(PORT_LINE.search(pinned.log()).group(2))
    assert f"on port {pinned.dynamodb_port} with 1 I/O and 1 page thread\n" in pinned.log()
    io_nice = os.nice(0)  # the daemon's threads start at the test's own
    assert threads_named(pinned, "dynamodb-io") == [io_nice]
    wait_for("the records to apply",
             lambda: pinned.positions("app").get("") == expected_position(stream))
    client = dynamodb(pinned)
    assert client.get_item(TableName="App", Key={"PK": {"S": "I1"}})["Item"]["day"] == {"S": "D1"}
    short = client.query(TableName="App", IndexName="ByDay", Limit=1,
                         KeyConditionExpression="#k = :v", ExpressionAttributeNames={"#k": "day"},
                         ExpressionAttributeValues={":v": {"S": "D1"}})
    assert short["Count"] == 1
    assert threads_named(pinned, "dynamodb-page") == []
    for _ in range(3):
        assert client.scan(TableName="App", IndexName="ByDay")["Count"] == 3
    assert day_query(client)["Count"] == 3  # no Limit: a page
    assert threads_named(pinned, "dynamodb-page") == [min(19, io_nice + 5)]
    # A page that waits for a position: on a page-wait thread, at the pages' priority.
    _, _, headers = post(pinned, "GetItem", '{"TableName":"App","Key":{"PK":{"S":"I1"}}}')
    status, body, _ = post(pinned, "Scan", '{"TableName":"App","IndexName":"ByDay"}',
                           {"x-cdcview-min-position": headers["x-cdcview-applied-position"]})
    assert (status, json.loads(body)["Count"]) == (200, 3)
    assert threads_named(pinned, "dynamodb-pgwait") == [min(19, io_nice + 5)]
    pinned.stop()
    for count, name, threads in ((2, "two", "2 I/O and 2 page threads"),
                                 (3, "three", "3 I/O and 3 page threads")):
        _, cfg = config(tmp_path, dynamodb_threads=count)
        d = daemon_factory(cfg, name=name, prefix=["taskset", "-c", "0"]).start()
        port = PORT_LINE.search(d.log()).group(2)
        assert f"on port {port} with {threads}\n" in d.log()
        assert threads_named(d, "dynamodb-io") == [io_nice] * count
        d.stop()
