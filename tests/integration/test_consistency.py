"""Read consistency and hot keys through the real daemon over gRPC.

Read-your-writes across replicas with a file source: a client's write shows up in one daemon;
the AppliedPosition.token of that answer, passed as min_position to a second daemon that
follows a copy of the same stream, makes it wait until it applied that far, so the write is
in its answer too. A daemon whose stream stops short answers DEADLINE_EXCEEDED naming what it
still waits for. Then max_staleness_seconds, GetHotKeys and `cdcview advise`.
"""

import json
import re
import threading
import time

import grpc
import pytest

from conftest import expected_position, metric, run_cli, wait_for
from kafka_fixture import kafka  # noqa: F401 (fixture)


def record(n, pk, day, created=None):
    """One DynamoDB Streams INSERT of PK=pk in partition `day` of view ByDay."""
    return json.dumps({
        "eventID": f"e{n}", "eventName": "INSERT",
        "dynamodb": {
            "ApproximateCreationDateTime": created if created is not None else time.time(),
            "Keys": {"PK": {"S": pk}},
            "NewImage": {"PK": {"S": pk}, "day": {"S": day}},
            "SequenceNumber": str(1000 + n),
        },
    }) + "\n"


def config(path):
    return {
        "sources": [{"name": "app", "table": "App", "file": {"path": path, "follow": True}}],
        "tables": [{
            "name": "App",
            "key": {"partition": "PK"},
            "views": [{"name": "ByDay", "partition_key": {"attribute": "day", "type": "S"}}],
        }],
    }


def query(d, pb, day, timeout=10, **consistency):
    req = pb.vs.QueryRequest(view="ByDay", partition_key=pb.av.AttributeValue(s=day),
                             consistency=pb.vs.ReadConsistency(**consistency))
    return d.stub.Query(req, timeout=timeout)


def pks(response):
    return sorted(e.item.attributes["PK"].s for e in response.entries)


def test_read_your_writes_across_replicas(daemon_factory, pb, tmp_path):
    stream_a, stream_b = str(tmp_path / "a.ndjson"), str(tmp_path / "b.ndjson")
    first = "".join(record(n, f"I{n}", "D1") for n in range(3))
    for path in (stream_a, stream_b):
        with open(path, "w") as f:
            f.write(first)
    a = daemon_factory(config(stream_a), name="a").start()
    wait_for("a to apply the first records",
             lambda: a.positions("app").get("") == expected_position(stream_a))

    # The client writes, then reads its write from a.
    mine = record(3, "mine", "D1")  # the same bytes go to b's copy
    with open(stream_a, "a") as f:
        f.write(mine)
    seen = wait_for("a to show the client's write", lambda: (
        r := query(a, pb, "D1")) and "mine" in pks(r) and r)
    token = seen.applied.token
    assert [(e.source, e.partition) for e in seen.applied.entries] == [("app", "")]

    # b starts behind (it follows its own copy, which gets the write a little later): with
    # the token it waits for the write instead of answering without it.
    b = daemon_factory(config(stream_b), name="b").start()
    start = time.monotonic()

    def append_later():
        time.sleep(0.5)
        with open(stream_b, "a") as f:
            f.write(mine)

    writer = threading.Thread(target=append_later)
    writer.start()
    r = query(b, pb, "D1", timeout=20, min_position=token)
    writer.join()
    assert pks(r) == ["I0", "I1", "I2", "mine"]
    assert time.monotonic() - start >= 0.5
    # The same place in copies of one file: offset, line and generation; the inode is each
    # copy's own.
    assert (r.applied.entries[0].position.rsplit(":", 1)[0] ==
            seen.applied.entries[0].position.rsplit(":", 1)[0])

    # A token b cannot reach before the deadline: a moved on, b's copy did not.
    with open(stream_a, "a") as f:
        f.write(record(4, "later", "D2"))
    ahead = wait_for("a to apply the later write", lambda: (
        r := query(a, pb, "D2")) and len(r.entries) == 1 and r)
    b_at = b.positions("app")[""]
    waiting_for = ahead.applied.entries[0].position
    start = time.monotonic()
    with pytest.raises(grpc.RpcError) as err:
        query(b, pb, "D2", timeout=1.0, min_position=ahead.applied.token)
    # The server gives up a tenth before the client's deadline, so its explanation arrives
    # (after the client's deadline the call would end with a bare "Deadline Exceeded").
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert err.value.details() == (
        f"view ByDay: min_position not applied before the deadline: source app: applied up to "
        f"{b_at}, waiting for {waiting_for}")
    assert time.monotonic() - start >= 0.9

    # The same through the CLI: --min-position takes the token in hex (what --print-position
    # prints), and the wait's explanation survives the CLI's --timeout.
    token_hex = ahead.applied.token.hex()
    start = time.monotonic()
    code, out, err_text = run_cli("query", "--view", "ByDay", "--pk", "D2", "--min-position",
                                  token_hex, "--timeout", "1", addr=b.addr)
    assert (code, out, err_text) == (
        1, "", f"cdcview: DEADLINE_EXCEEDED: view ByDay: min_position not applied before the "
               f"deadline: source app: applied up to {b_at}, waiting for {waiting_for}\n")
    assert time.monotonic() - start >= 0.9
    # a has applied it: every read subcommand waits for it (at once here) and answers.
    later = '{"PK":"later","day":"D2"}\n'
    position = f"cdcview: applied position {token_hex}\n"
    for args, want in ((["query", "--view", "ByDay", "--pk", "D2"], later),
                       (["scan", "--view", "ByDay"], None),
                       (["get", "--table", "App", "--key", "PK=later"], later)):
        code, out, err_text = run_cli(*args, "--min-position", token_hex, "--max-staleness", "60",
                                      "--print-position", addr=a.addr)
        assert (code, err_text) == (0, position), args
        assert want is None or out == want, args
    code, out, err_text = run_cli("get", "--table", "App", "--key", "PK=later", "--min-position",
                                  "not-hex", addr=a.addr)
    assert (code, out, err_text) == (
        2, "", "cdcview: --min-position not-hex: expected the hex applied position printed by "
               "cdcview\n")
    # Without a deadline the server waits its cap (10 s), then says what it waited for.
    with pytest.raises(grpc.RpcError) as err:
        query(b, pb, "D2", timeout=None, min_position=ahead.applied.token)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert err.value.details() == (
        f"view ByDay: min_position not applied before the deadline (the request had none; the "
        f"server waits at most 10 s, server.max_wait_ms): source app: applied up to {b_at}, "
        f"waiting for "
        f"{ahead.applied.entries[0].position}")
    with pytest.raises(grpc.RpcError) as err:
        query(b, pb, "D2", min_position=b"garbage")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == (
        "consistency.min_position is not a position token; pass AppliedPosition.token from an "
        "earlier response (not a page token), unchanged")
    b.stop()
    a.stop()


def test_cli_max_staleness_refuses_a_view_fed_by_a_failed_source(daemon_factory, tmp_path):
    d = daemon_factory(config(str(tmp_path / "missing.ndjson"))).start()
    wait_for("the source to fail", lambda: d.source("app").state == "error")
    error = d.source("app").error
    code, out, err = run_cli("query", "--view", "ByDay", "--pk", "D0", addr=d.addr)
    assert (code, out, err) == (0, "", "")
    for read in (["query", "--view", "ByDay", "--pk", "D0"], ["scan", "--view", "ByDay"],
                 ["get", "--table", "App", "--key", "PK=x"]):
        what = "table App" if read[0] == "get" else "view ByDay"
        code, out, err = run_cli(*read, "--max-staleness", "5", addr=d.addr)
        assert (code, out, err) == (
            1, "", f"cdcview: FAILED_PRECONDITION: {what} cannot be shown fresh: source app is "
                   f"in error ({error}); max_staleness_seconds is 5\n"), read
    d.stop()


def test_a_view_key_of_the_wrong_type_is_counted_and_described(daemon_factory, pb, tmp_path):
    stream = tmp_path / "s.ndjson"
    numeric = json.loads(record(1, "numeric", "D1"))
    numeric["dynamodb"]["NewImage"]["day"] = {"N": "7"}  # ByDay's key is S
    stream.write_text(record(0, "ok", "D1") + json.dumps(numeric) + "\n")
    d = daemon_factory(config(str(stream))).start()
    wait_for("both records", lambda: d.source("app").events_applied == 2)
    desc = d.stub.DescribeView(pb.vs.DescribeViewRequest(view="ByDay"), timeout=10)
    assert (desc.item_count, desc.skipped_key_type_mismatch) == (1, 1)
    assert metric(d.metrics(), "cdcview_view_skipped_total", view="ByDay",
                  reason="key_type_mismatch") == 1
    code, out, err = run_cli("views", addr=d.addr)
    assert (code, err) == (0, "")
    assert json.loads(out)["skipped"] == {"key_type_mismatch": 1}
    d.stop()


def test_max_staleness_and_hot_keys(daemon_factory, pb, tmp_path):
    stream = str(tmp_path / "s.ndjson")
    old = time.time() - 3600
    with open(stream, "w") as f:
        f.write(record(0, "old", "D0", created=old))
    d = daemon_factory(config(stream)).start()
    wait_for("the old record", lambda: d.source("app").events_applied == 1)
    # A following file source is "caught_up" at the file's end: it is not behind, whatever
    # the age of the last event it applied.
    wait_for("caught_up", lambda: d.source("app").state == "caught_up")
    assert pks(query(d, pb, "D0", max_staleness_seconds=5)) == ["old"]

    with open(stream, "a") as f:
        for n in range(1, 41):
            day = "HOT" if n % 4 else f"D{n}"  # 30 writes to HOT, 10 to D4..D40
            f.write(record(n, f"I{n}", day))
    wait_for("41 events", lambda: d.source("app").events_applied == 41)
    hot = d.stub.GetHotKeys(pb.vs.GetHotKeysRequest(view="ByDay", limit=2), timeout=10)
    assert [k.key.s for k in hot.keys] == ["HOT", "D0"]  # ties in key order
    top = hot.keys[0]
    assert top.share == pytest.approx(30 / 41)
    assert top.error_bound == 0
    assert top.writes_per_second == pytest.approx(30 / hot.window_seconds)
    assert hot.total_writes_per_second == pytest.approx(41 / hot.window_seconds)
    assert hot.shard_count == 0 and len(hot.logical_keys) == 0
    # Over the whole run: the same writes here (all of them are recent), over the time since
    # the first one (what `cdcview advise` shows once the recent windows are empty).
    run = d.stub.GetHotKeys(pb.vs.GetHotKeysRequest(view="ByDay", limit=2, whole_run=True),
                            timeout=10)
    assert [(k.key.s, k.share, k.error_bound) for k in run.keys] == [
        (k.key.s, k.share, k.error_bound) for k in hot.keys]
    assert run.total_writes_per_second == pytest.approx(41 / run.window_seconds)
    table = d.stub.GetHotKeys(pb.vs.GetHotKeysRequest(table="App"), timeout=10)
    assert len(table.keys) == 10 and all(k.share == pytest.approx(1 / 41) for k in table.keys)
    with pytest.raises(grpc.RpcError) as err:
        d.stub.GetHotKeys(pb.vs.GetHotKeysRequest(view="Nope"), timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert err.value.details() == 'view "Nope" does not exist (views: ByDay)'

    # The readiness ticker publishes the top key's share once a second.
    wait_for("cdcview_view_hot_key_share_ratio",
             lambda: metric(d.metrics(), "cdcview_view_hot_key_share_ratio",
                            view="ByDay") == pytest.approx(30 / 41))

    code, out, err_text = run_cli("advise", "--view", "ByDay", "--target-writes-per-shard",
                                  "0.01", addr=d.addr)
    assert code == 0, err_text
    lines = out.splitlines()
    assert re.fullmatch(r"view ByDay: \d+\.\d entry writes/s over the last \d+\.\d s", lines[0])
    assert re.fullmatch(
        r'  shard "HOT": \d+\.\d writes/s, 73\.2% of the view\'s writes, sketch error <= 0 '
        r'writes in \d+\.\d s; over 0\.01 writes/s per partition: shards: \{ count: \d+, '
        r'suffix: "#\{shard\}" \}', lines[1]), lines[1]
    d.stop()


def test_min_kafka_offsets_with_a_real_broker(daemon_factory, pb, kafka):  # noqa: F811
    """A producer's delivery report names (topic, partition, offset): reading with it as
    min_kafka_offsets returns the write, however far behind the consumer was."""
    from confluent_kafka import Producer

    topic = kafka.topic("consistency", partitions=2)
    cfg = config("unused")
    cfg["sources"] = [{"name": "orders", "table": "App", "kafka": {
        "brokers": kafka.bootstrap, "topics": [topic], "group": f"g-{topic}",
        "format": "dynamodb-json",
        "properties": {"heartbeat.interval.ms": "300", "session.timeout.ms": "6000"}}}]
    d = daemon_factory(cfg).start()
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all"})
    reports = []
    for n in range(20):
        producer.produce(topic, key=f"I{n}".encode(), value=record(n, f"I{n}", "K").encode(),
                         partition=n % 2,
                         on_delivery=lambda err, msg: reports.append((err, msg.partition(),
                                                                      msg.offset())))
    assert producer.flush(30) == 0
    assert [e for e, _, _ in reports] == [None] * 20
    last = {p: max(o for _, q, o in reports if q == p) for p in (0, 1)}
    offsets = [pb.vs.KafkaOffset(topic=topic, partition=p, offset=o) for p, o in last.items()]
    r = query(d, pb, "K", timeout=60, min_kafka_offsets=offsets)
    assert pks(r) == sorted(f"I{n}" for n in range(20))
    applied = {e.partition: int(e.position) for e in r.applied.entries}
    assert applied == {f"{topic}/0": last[0] + 1, f"{topic}/1": last[1] + 1}

    with pytest.raises(grpc.RpcError) as err:
        query(d, pb, "K", min_kafka_offsets=[pb.vs.KafkaOffset(topic="nope", partition=0,
                                                               offset=1)])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == (
        f'consistency.min_kafka_offsets: no source reads topic "nope" (topics read: {topic})')
    with pytest.raises(grpc.RpcError) as err:
        query(d, pb, "K", timeout=1.0, min_kafka_offsets=[
            pb.vs.KafkaOffset(topic=topic, partition=0, offset=last[0] + 5)])
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    del producer  # before the session's broker stops: no client left reconnecting
    d.stop()


def fnv1a32(data):
    h = 2166136261
    for byte in data:
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return h


def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def rss_kib(pid, field):
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_forged_position_token_is_refused_before_any_allocation(daemon_factory, pb, tmp_path):
    stream = str(tmp_path / "a.ndjson")
    with open(stream, "w") as f:
        f.write("".join(record(n, f"I{n}", "D1") for n in range(3)))
    d = daemon_factory(dict(config(stream), server={
        "grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0", "fast_reads": "127.0.0.1:0"})).start()
    assert d.fast_addr is not None, d.log()[-2000:]
    wait_for("the records to apply", lambda: d.positions("app").get("") == expected_position(stream))
    real = query(d, pb, "D1").applied.token
    assert len(real) < 100

    # A correctly sealed 4,000,000-byte token whose entry count (3,999,000) fits the body's
    # bytes but not its entries (three length prefixes each): the reader must not size
    # anything by that count.
    claimed = 3_999_000
    head = b"cp\x01" + varint(claimed)
    body = head + bytes(4_000_000 - 4 - len(head))
    forged = body + fnv1a32(body).to_bytes(4, "little")
    assert len(forged) == 4_000_000
    expected = (
        "consistency.min_position: a token of 4000000 bytes is larger than any this daemon "
        "gives (at most 65536); pass AppliedPosition.token from an earlier response unchanged")

    pid = d.proc.pid
    for port, addr in (("gRPC", d.addr), ("fast read", d.fast_addr)):
        rss_before, peak_before = rss_kib(pid, "VmRSS"), rss_kib(pid, "VmHWM")
        errors = []

        def call():
            # A connection per call: twelve 4 MB requests on one connection would pass the fast
            # port's per-connection buffer bound (16 MiB), which is refused for that reason instead.
            with grpc.insecure_channel(addr, options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
                req = pb.vs.QueryRequest(view="ByDay", partition_key=pb.av.AttributeValue(s="D1"),
                                         consistency=pb.vs.ReadConsistency(min_position=forged))
                try:
                    pb.grpc.ViewServiceStub(ch).Query(req, timeout=30)
                    errors.append("answered")
                except grpc.RpcError as e:
                    errors.append((e.code(), e.details()))

        # Concurrently, as a hostile client would: twelve such calls at once.
        threads = [threading.Thread(target=call) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rss_after, peak_after = rss_kib(pid, "VmRSS"), rss_kib(pid, "VmHWM")
        print(f"{port} port: VmRSS {rss_before} -> {rss_after} KiB, "
              f"VmHWM {peak_before} -> {peak_after} KiB")
        # The requests themselves (12 x 4 MB received) are all the memory they may cost.
        assert rss_after - rss_before < 50 * 1024, port
        assert peak_after - peak_before < 100 * 1024, port
        assert errors == [(grpc.StatusCode.INVALID_ARGUMENT, expected)] * 12, port
    # The real token still works.
    assert pks(query(d, pb, "D1", min_position=real)) == ["I0", "I1", "I2"]
    d.stop()
