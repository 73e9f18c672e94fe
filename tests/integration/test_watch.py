"""Watch streams through grpcio against a follow-mode file source: the work queue, snapshot +
changes against the final Scan, resume, out-of-range positions, slow and stalled watchers,
shutdown with watchers open."""

import json
import queue
import re
import subprocess
import threading
import time

import grpc
import pytest

import reference as ref
import streams
from conftest import entry_to_tuple, expected_position, metric, run_cli, wait_for


def config_for(path, **watch):
    config = {"sources": [{"name": "src", "table": "App",
                           "file": {"path": str(path), "follow": True}}],
              "tables": [ref.EXAMPLE_TABLE]}
    if watch:
        config["watch"] = watch
    return config


def append(path, records):
    with open(path, "a", encoding="utf-8", newline="\n") as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


def order(seq, name, status, open_since=None, total="10.5"):
    image = {"PK": {"S": "USER#U1"}, "SK": {"S": "ORDER#o1"}, "type": {"S": "order"},
             "status": {"S": status}, "created_at": {"S": "2025-03-01T10:00:00Z"},
             "total": {"N": total}, "GSI1PK": {"S": f"STATUS#{status}"},
             "GSI1SK": {"S": "2025-03-01T10:00:00Z"}}
    if open_since:
        image["open_since"] = {"S": open_since}
    return {"eventID": f"{seq:032x}", "eventName": name, "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "dynamodb": {"ApproximateCreationDateTime": streams.START,
                         "Keys": {"PK": {"S": "USER#U1"}, "SK": {"S": "ORDER#o1"}},
                         "NewImage": image, "SequenceNumber": str(seq), "SizeBytes": 100,
                         "StreamViewType": "NEW_IMAGE"}}


class Watch:
    """One Watch stream read on a thread; events (or the final error) land in a queue."""

    def __init__(self, d, pace=0.0, read=True, channel=None, **request):
        self.events, self.error = [], None
        self._q = queue.Queue()
        self._channel = channel
        stub = d.stubs.grpc.ViewServiceStub(channel) if channel else d.stub
        self.call = stub.Watch(d.stubs.vs.WatchRequest(**request))
        self._pace = pace
        if read:
            threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        try:
            for e in self.call:
                self._q.put(e)
                if self._pace:
                    time.sleep(self._pace)
        except grpc.RpcError as e:
            self._q.put(e)
        else:
            self._q.put(None)

    def next(self, timeout=30):
        """The next event; fails on timeout; returns the RpcError / None at the end."""
        try:
            e = self._q.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no Watch event within {timeout}s; got {len(self.events)} so far")
        if isinstance(e, grpc.RpcError) or e is None:
            self.error = e
        else:
            self.events.append(e)
        return e

    def until(self, predicate, what, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            e = self.next(timeout=max(0.1, deadline - time.monotonic()))
            if predicate(e):
                return e
            if self.error is not None or (e is None):
                pytest.fail(f"stream ended ({self.error}) before {what}")

    def drain_for(self, seconds):
        """Reads whatever arrives within `seconds`; returns those events."""
        got, deadline = [], time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                e = self._q.get(timeout=left)
            except queue.Empty:
                break
            if isinstance(e, grpc.RpcError) or e is None:
                self.error = e
                break
            self.events.append(e)
            got.append(e)
        return got


def change(e):
    c = e.change
    return (c.op, entry_to_tuple(c.entry), (c.cause.source, c.cause.partition, c.cause.position),
            e.position)


def entry_id(entry):
    """An entry's identity in its view: its keys and the item's table key."""
    t = entry_to_tuple(entry)
    return (json.dumps(t[0]), json.dumps(t[1]), json.dumps(t[2]["PK"]), json.dumps(t[2]["SK"]))


def wait_ready(d, *views):
    """A fresh store builds its views once the writer starts, after the daemon is SERVING; a
    Watch before that answers UNAVAILABLE."""
    for view in views:
        wait_for(f"{view} READY", lambda: d.stub.DescribeView(
            d.stubs.vs.DescribeViewRequest(view=view)).state == d.stubs.vs.ViewDescription.READY)


@pytest.fixture
def stream_file(tmp_path):
    path = tmp_path / "stream.ndjson"
    path.write_text("")
    return path


def test_open_orders_is_a_work_queue(daemon_factory, stream_file, pb):
    d = daemon_factory(config_for(stream_file)).start()
    wait_ready(d, "OpenOrders")
    w = Watch(d, view="OpenOrders", snapshot=True)
    done = w.next()
    assert not isinstance(done, grpc.RpcError), done
    assert done.WhichOneof("event") == "snapshot_done" and done.position
    assert w.events == [done]  # nothing open yet

    append(stream_file, [order(100, "INSERT", "PENDING", open_since="2025-03-01T10:00:00Z")])
    opened = w.next()
    assert opened.WhichOneof("event") == "change"
    item = {"PK": {"S": "USER#U1"}, "SK": {"S": "ORDER#o1"},
            "open_since": {"S": "2025-03-01T10:00:00Z"}, "status": {"S": "PENDING"},
            "total": {"N": "10.5"}}
    first_position = expected_position(stream_file)
    assert change(opened)[:3] == (pb.vs.EntryChange.PUT,
                                  ({"S": "OPEN"}, {"S": "2025-03-01T10:00:00Z"}, item),
                                  ("src", "", first_position))

    # Delivered: the order leaves OpenOrders; the DELETE carries the entry's last image.
    append(stream_file, [order(200, "MODIFY", "DELIVERED")])
    closed = w.next()
    assert change(closed)[:3] == (pb.vs.EntryChange.DELETE,
                                  ({"S": "OPEN"}, {"S": "2025-03-01T10:00:00Z"}, item),
                                  ("src", "", expected_position(stream_file)))
    assert w.drain_for(0.5) == []  # GSI1 and ByEntity changed too, but not this view
    assert len({done.position, opened.position, closed.position}) == 3

    m = d.metrics()
    assert metric(m, "cdcview_watchers", view="OpenOrders") == 1
    assert metric(m, "cdcview_watchers", view="GSI1") == 0
    # The INSERT: GSI1, OpenOrders, ByMember and ByEntity puts; the MODIFY: GSI1 and ByEntity
    # delete + put (their keys moved), the OpenOrders delete (ByMember's keys-only entry is as
    # it was).
    assert metric(m, "cdcview_change_log_entries") == 9
    w.call.cancel()
    wait_for("the watcher to close", lambda: metric(d.metrics(), "cdcview_watchers",
                                                    view="OpenOrders") == 0)
    assert metric(d.metrics(), "cdcview_watch_events_total", view="OpenOrders") == 3
    d.stop()


def test_cli_prints_one_json_line_per_event(daemon_factory, stream_file, binaries):
    d = daemon_factory(config_for(stream_file)).start()
    append(stream_file, [order(100, "INSERT", "PENDING", open_since="2025-03-01T10:00:00Z")])
    d.wait_applied("src", 1)
    cli = subprocess.Popen([binaries[1], "--addr", d.addr, "watch", "OpenOrders", "--snapshot",
                            "--key", "OPEN"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in cli.stdout], daemon=True).start()

    def line():
        try:
            return json.loads(lines.get(timeout=30))
        except queue.Empty:
            pytest.fail("cdcview watch printed nothing within 30s")

    try:
        snap = line()
        assert snap == {"snapshot": {"PK": "USER#U1", "SK": "ORDER#o1",
                                     "open_since": "2025-03-01T10:00:00Z", "status": "PENDING",
                                     "total": 10.5}}
        done = line()
        assert list(done) == ["snapshot_done", "position"] and re.fullmatch(r"[0-9a-f]+", done["position"])
        append(stream_file, [order(200, "MODIFY", "DELIVERED")])
        gone = line()
        assert {k: gone[k] for k in ("op", "item", "cause")} == {
            "op": "DELETE", "item": snap["snapshot"],
            "cause": {"source": "src", "partition": "", "position": expected_position(stream_file)}}
    finally:
        cli.kill()
        cli.wait()
    # A position that is not hex is a usage error; one the server cannot read is its error.
    code, out, err = run_cli("watch", "OpenOrders", "--from", "zz", addr=d.addr)
    assert (code, out) == (2, "")
    assert err == ('cdcview: --from zz: expected the hex "position" of an event printed by '
                   'cdcview watch\n')
    code, out, err = run_cli("watch", "OpenOrders", "--from", "00", addr=d.addr)
    assert (code, out) == (1, "")
    assert err == ("cdcview: INVALID_ARGUMENT: from_position is malformed; pass a "
                   "WatchEvent.position unchanged, or watch again without from_position (with "
                   "snapshot) to start over\n")
    d.stop()


def canonical(entries):
    """Entry tuples in a comparable, order-free form."""
    return sorted(json.dumps(t, sort_keys=True) for t in entries)


def apply_events(state, events):
    """Applies snapshot entries and changes to {entry id: entry tuple}."""
    for e in events:
        kind = e.WhichOneof("event")
        if kind == "snapshot_entry":
            state[entry_id(e.snapshot_entry)] = entry_to_tuple(e.snapshot_entry)
        elif kind == "change":
            key = entry_id(e.change.entry)
            if e.change.op == e.change.PUT:
                state[key] = entry_to_tuple(e.change.entry)
            else:
                assert key in state, f"DELETE of an entry the watcher never saw: {key}"
                assert state.pop(key) == entry_to_tuple(e.change.entry), "DELETE's last image"


def wait_equal_to_scan(d, view, w):
    """Waits until what `w` received, applied in order, equals a Scan of `view`."""
    final = canonical(entry_to_tuple(e) for e in d.scan(view)[0])
    state = {}

    def caught_up():
        apply_events(state, w.drain_for(0.2))
        return canonical(state.values()) == final

    apply_events(state, w.events)
    wait_for(f"{view} watcher to equal the final scan", caught_up,
             describe=lambda: f"{len(state)} entries vs {len(final)}")


def test_snapshot_and_changes_equal_the_final_scan(daemon_factory, stream_file):
    records = streams.generate(1500, seed=5)
    append(stream_file, records[:700])
    d = daemon_factory(config_for(stream_file)).start()
    wait_for("the first part applied", lambda: d.positions("src").get("") == expected_position(stream_file))
    watchers = {v: Watch(d, view=v, snapshot=True) for v in ("GSI1", "OpenOrders", "ByScore")}
    for w in watchers.values():
        w.until(lambda e: e.WhichOneof("event") == "snapshot_done", "snapshot_done")
    append(stream_file, records[700:])
    wait_for("everything applied", lambda: d.positions("src").get("") == expected_position(stream_file))
    for view, w in watchers.items():
        wait_equal_to_scan(d, view, w)
        assert w.drain_for(0.3) == []  # and nothing more
        assert len([e for e in w.events if e.WhichOneof("event") == "snapshot_entry"]) > 0
    d.stop()


def test_a_snapshot_read_in_chunks_while_changes_commit_is_exact(daemon_factory, stream_file):
    """A small stream buffer makes the snapshot many chunks, read at different log positions:
    the changes to entries already sent come before snapshot_done, without a position, and
    snapshot + changes still equal the view."""
    records = streams.generate(3000, seed=21)
    append(stream_file, records[:1500])
    d = daemon_factory(config_for(stream_file, max_stream_buffer_bytes=2048)).start()
    wait_for("the first part applied", lambda: d.positions("src").get("") == expected_position(stream_file))
    # Small flow-control windows: the server feels the pace, so the chunks spread over the
    # commits below.
    channel = grpc.insecure_channel(d.addr, options=[("grpc.http2.bdp_probe", 0),
                                                     ("grpc.http2.lookahead_bytes", 1024)])
    watchers = {v: Watch(d, view=v, snapshot=True, pace=0.01, channel=channel)
                for v in ("GSI1", "ByScore")}
    for i in range(1500, len(records), 30):
        append(stream_file, records[i:i + 30])
        time.sleep(0.02)
    wait_for("everything applied", lambda: d.positions("src").get("") == expected_position(stream_file))
    for view, w in watchers.items():
        w.until(lambda e: e.WhichOneof("event") == "snapshot_done", "snapshot_done", timeout=120)
        done = len(w.events) - 1
        during = [e for e in w.events[:done] if e.WhichOneof("event") == "change"]
        assert during and all(e.position == b"" for e in during), view
        wait_equal_to_scan(d, view, w)
        assert all(e.position for e in w.events[done:]), view
        w.call.cancel()
    channel.close()
    d.stop()


def test_resume_replays_exactly_the_missed_changes(daemon_factory, stream_file):
    records = streams.generate(800, seed=9)
    d = daemon_factory(config_for(stream_file)).start()
    wait_ready(d, "GSI1")
    w = Watch(d, view="GSI1", snapshot=True)
    w.until(lambda e: e.WhichOneof("event") == "snapshot_done", "snapshot_done")
    append(stream_file, records)
    wait_for("everything applied", lambda: d.positions("src").get("") == expected_position(stream_file))
    w.drain_for(1.0)
    changes = [change(e) for e in w.events if e.WhichOneof("event") == "change"]
    assert len(changes) > 300
    middle = len(changes) // 2
    resumed = Watch(d, view="GSI1", from_position=changes[middle][3])
    got = []
    while len(got) < len(changes) - middle - 1:
        e = resumed.next()
        assert not isinstance(e, grpc.RpcError), (e.code(), e.details())
        got.append(change(e))
    assert got == changes[middle + 1:]
    assert resumed.drain_for(0.3) == []
    d.stop()


def test_positions_that_cannot_resume_are_refused(daemon_factory, stream_file, pb):
    d = daemon_factory(config_for(stream_file, retain_changes=60, max_lag_changes=30)).start()
    wait_ready(d, "GSI1", "OpenOrders", "ByScore")
    w = Watch(d, view="GSI1", snapshot=True)
    start = w.until(lambda e: e.WhichOneof("event") == "snapshot_done", "snapshot_done").position
    append(stream_file, streams.generate(200, seed=3))
    wait_for("everything applied", lambda: d.positions("src").get("") == expected_position(stream_file))
    assert metric(d.metrics(), "cdcview_change_log_entries") == 60

    def error_of(**request):
        with pytest.raises(grpc.RpcError) as e:
            next(iter(d.stub.Watch(pb.vs.WatchRequest(**request), timeout=10)))
        return e.value.code(), e.value.details()

    assert error_of(view="GSI1", from_position=start) == (
        grpc.StatusCode.OUT_OF_RANGE,
        "from_position is older than the retained change log (it keeps the last 60 changes, "
        "watch.retain_changes); watch again with snapshot to start over")
    assert error_of(view="OpenOrders", from_position=start) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "from_position belongs to view GSI1, not OpenOrders; pass a position from a Watch of "
        "this view")
    assert error_of(view="GSI1", from_position=b"garbage") == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "from_position is malformed; pass a WatchEvent.position unchanged, or watch again "
        "without from_position (with snapshot) to start over")
    assert error_of(view="Nope")[0] == grpc.StatusCode.NOT_FOUND
    assert error_of(view="Nope")[1].startswith('view "Nope" does not exist (views: GSI1, ')
    assert error_of(view="ByScore", partition_key=pb.av.AttributeValue(n="1")) == (
        grpc.StatusCode.INVALID_ARGUMENT, "partition_key: view ByScore has a S partition key, got N")
    d.stop()


def test_slow_watcher_is_cut_off_and_ingestion_goes_on(daemon_factory, stream_file, pb):
    d = daemon_factory(config_for(stream_file, retain_changes=40000, max_lag_changes=1000)).start()
    wait_ready(d, "GSI1")
    # A small flow-control window, so the server (not the client's buffer) feels the slowness.
    channel = grpc.insecure_channel(d.addr, options=[("grpc.http2.bdp_probe", 0),
                                                     ("grpc.http2.lookahead_bytes", 1024)])
    slow = Watch(d, view="GSI1", snapshot=True, pace=0.01, channel=channel)
    slow.until(lambda e: e.WhichOneof("event") == "snapshot_done", "snapshot_done")
    records = streams.generate(4000, seed=11)
    # A steady stream (about 2,500 records/s), so the watcher receives changes before it
    # loses ground for good.
    for i in range(0, len(records), 50):
        append(stream_file, records[i:i + 50])
        time.sleep(0.02)
    behind = slow.until(lambda e: e.WhichOneof("event") == "fell_behind", "fell_behind", timeout=120)
    end = slow.next()
    assert isinstance(end, grpc.RpcError) and end.code() == grpc.StatusCode.ABORTED
    assert re.fullmatch(
        r"watcher fell behind: \d+ changes behind the change log's head \(limit 1000, "
        r"watch.max_lag_changes or the lag it started with\); resume with from_position set to "
        r"the fell_behind event's position", end.details()), end.details()
    # Ingestion was never held up: everything gets applied.
    wait_for("everything applied", lambda: d.positions("src").get("") == expected_position(stream_file))
    assert metric(d.metrics(), "cdcview_watchers_cut_off_total", view="GSI1",
                  reason="fell_behind") == 1
    assert sum(e.WhichOneof("event") == "change" for e in slow.events) > 0
    # The position it was given still resumes: what it received before plus what the resumed
    # stream replays is exactly the view.
    final = canonical(entry_to_tuple(e) for e in d.scan("GSI1")[0])
    state = {}
    apply_events(state, slow.events)
    resumed = Watch(d, view="GSI1", from_position=behind.position)

    def caught_up():
        apply_events(state, resumed.drain_for(0.2))
        return canonical(state.values()) == final

    wait_for("the resumed watcher to equal the final scan", caught_up,
             describe=lambda: f"{len(state)} entries vs {len(final)}; received "
                              f"{len(slow.events)} then {len(resumed.events)}, {resumed.error}")
    resumed.call.cancel()
    channel.close()
    d.stop()


def test_stalled_watchers_do_not_stop_ingestion_or_shutdown(daemon_factory, stream_file):
    d = daemon_factory(config_for(stream_file, retain_changes=3000, max_lag_changes=300)).start()
    wait_ready(d, "GSI1", "ByLocation")
    channel = grpc.insecure_channel(d.addr, options=[("grpc.http2.bdp_probe", 0)])
    # Never read: the server's Writes block once the flow-control window is full.
    stalled = Watch(d, view="GSI1", read=False, channel=channel)
    idle = Watch(d, view="ByLocation")
    wait_for("both watchers open", lambda: metric(d.metrics(), "cdcview_watchers", view="GSI1") == 1
             and metric(d.metrics(), "cdcview_watchers", view="ByLocation") == 1)
    append(stream_file, streams.generate(4000, seed=12))
    wait_for("everything applied", lambda: d.positions("src").get("") == expected_position(stream_file))
    # Blocked for over a second while too far behind: the watchdog frees its handler.
    wait_for("the stalled watcher cut off",
             lambda: metric(d.metrics(), "cdcview_watchers_cut_off_total", view="GSI1",
                            reason="fell_behind") == 1)
    wait_for("the stalled watcher closed",
             lambda: metric(d.metrics(), "cdcview_watchers", view="GSI1") == 0)
    # The client is told why, once it reads again: by the watchdog while blocked, or by the
    # stream itself if it noticed the lag between two Writes (its fell_behind event blocked).
    code, details = end_of(stalled.call)
    assert code == grpc.StatusCode.ABORTED
    assert re.fullmatch(
        r"watcher stopped reading while more than watch.max_lag_changes changes behind; resume "
        r"with from_position set to the last position received|watcher fell behind: \d+ changes "
        r"behind the change log's head \(limit 300, watch.max_lag_changes or the lag it started "
        r"with\); resume with from_position set to the fell_behind event's position", details), details
    # Another stalled watcher, then stop with it and the idle one open: the drain stays short.
    stalled2 = Watch(d, view="GSI1", read=False, snapshot=True, channel=channel)
    wait_for("the second stalled watcher open",
             lambda: metric(d.metrics(), "cdcview_watchers", view="GSI1") == 1)
    started = time.monotonic()
    d.stop()
    assert time.monotonic() - started < 5
    drained = int(re.search(r"drained in (\d+) ms", d.log()).group(1))
    assert drained < 1000, d.log()[-2000:]
    channel.close()
    del stalled, stalled2, idle


def end_of(call, timeout=30):
    """Reads `call` to its end (what the client had buffered, then the status): (code, details)."""
    outcome = queue.Queue()

    def read():
        try:
            for _ in call:
                pass
        except grpc.RpcError as e:
            outcome.put((e.code(), e.details()))
        else:
            outcome.put((grpc.StatusCode.OK, ""))

    threading.Thread(target=read, daemon=True).start()
    return outcome.get(timeout=timeout)


def test_watch_streams_are_capped(daemon_factory, stream_file, pb):
    d = daemon_factory(config_for(stream_file, max_streams=3)).start()
    wait_ready(d, "GSI1")
    open_ = [Watch(d, view="GSI1") for _ in range(3)]
    wait_for("three watchers open", lambda: metric(d.metrics(), "cdcview_watchers", view="GSI1") == 3)
    assert metric(d.metrics(), "cdcview_watchers_refused_total") == 0
    refused = (grpc.StatusCode.RESOURCE_EXHAUSTED,
               "too many Watch streams: 3 are open (watch.max_streams); close one, retry later, "
               "or raise watch.max_streams")
    # Refused before anything else is looked at, even for a view that does not exist.
    for view in ("GSI1", "Nope"):
        w = Watch(d, view=view, snapshot=True)
        assert isinstance(w.next(), grpc.RpcError)
        assert (w.error.code(), w.error.details()) == refused
    assert metric(d.metrics(), "cdcview_watchers_refused_total") == 2
    # A closed stream frees its place.
    open_[0].call.cancel()
    wait_for("two watchers open", lambda: metric(d.metrics(), "cdcview_watchers", view="GSI1") == 2)
    again = Watch(d, view="GSI1", snapshot=True)
    assert again.until(lambda e: e.WhichOneof("event") == "snapshot_done", "snapshot_done")
    assert metric(d.metrics(), "cdcview_watchers", view="GSI1") == 3
    assert metric(d.metrics(), "cdcview_watchers_refused_total") == 2
    d.stop()


BIG_TABLE = {"name": "Big", "key": {"partition": "PK"},
             "views": [{"name": "All", "partition_key": {"attribute": "g", "type": "S"},
                        "sort_key": {"attribute": "PK", "type": "S"}, "projection": "ALL"}]}


def big_record(seq, key, version, blob_bytes):
    """A put of item `key` whose `blob` (blob_bytes long) names its version."""
    image = {"PK": {"S": key}, "g": {"S": "G"}, "v": {"N": str(version)},
             "blob": {"S": (f"{key}/{version}/" * blob_bytes)[:blob_bytes]}}
    return {"eventID": f"{seq:032x}", "eventName": "MODIFY" if version else "INSERT",
            "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
            "dynamodb": {"ApproximateCreationDateTime": streams.START, "Keys": {"PK": {"S": key}},
                         "NewImage": image, "SequenceNumber": str(10**20 + seq),
                         "SizeBytes": blob_bytes, "StreamViewType": "NEW_IMAGE"}}


def rss_bytes(pid):
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB$", f.read(), re.M).group(1)) * 1024


STALLED = re.compile(
    r"watch stream cut off: the client read nothing for 5000 ms "
    r"\(watch.stalled_stream_timeout_ms\) while (\d+) bytes were waiting for it "
    r"\(watch.max_stream_buffer_bytes: 262144\); read faster, or watch again with snapshot \(a "
    r"snapshot cannot be resumed\)")


def test_snapshot_watchers_that_never_read_are_bounded_and_cut_off(daemon_factory, stream_file, pb):
    """Snapshot watchers that never read each hold at most their buffer (plus gRPC's window)
    until they are cut off with a status saying why; a watcher reading alongside gets every
    change."""
    buffer_bytes, stalled_ms, watchers, items, blob = 262144, 5000, 16, 8000, 1000
    d = daemon_factory({
        "sources": [{"name": "src", "table": "Big", "file": {"path": str(stream_file), "follow": True}}],
        "tables": [BIG_TABLE],
        "watch": {"max_stream_buffer_bytes": buffer_bytes, "stalled_stream_timeout_ms": stalled_ms,
                  "max_streams": watchers + 1}}).start()
    append(stream_file, [big_record(i, f"K{i:05d}", 0, blob) for i in range(items)])
    wait_for("the items applied", lambda: d.positions("src").get("") == expected_position(stream_file))
    wait_ready(d, "All")
    good = Watch(d, view="All", snapshot=True)
    good.until(lambda e: e.WhichOneof("event") == "snapshot_done", "snapshot_done")
    assert sum(e.WhichOneof("event") == "snapshot_entry" for e in good.events) == items
    before = rss_bytes(d.proc.pid)

    # One connection each, as separate clients: they do not share a flow-control window.
    channels = [grpc.insecure_channel(d.addr) for _ in range(watchers)]
    stalled = [Watch(d, view="All", snapshot=True, read=False, channel=c) for c in channels]
    wait_for("the stalled watchers open",
             lambda: metric(d.metrics(), "cdcview_watchers", view="All") == watchers + 1)
    # Changes while they stall: the good watcher gets each, in order, once.
    updates = [big_record(items + i, f"K{i * 7:05d}", 1, blob) for i in range(300)]
    append(stream_file, updates)
    peak = before
    deadline = time.monotonic() + stalled_ms / 1000 + 0.5
    while time.monotonic() < deadline:
        peak = max(peak, rss_bytes(d.proc.pid))
        time.sleep(0.05)
    wait_for("the stalled watchers cut off",
             lambda: metric(d.metrics(), "cdcview_watchers_cut_off_total", view="All",
                            reason="stalled") == watchers,
             describe=lambda: str(metric(d.metrics(), "cdcview_watchers", view="All")))
    # What a stream may hold: its buffer, plus gRPC's own (about a flow-control window, taken
    # here as 1 MiB), plus 32 MiB for the process around them.
    bound = watchers * (buffer_bytes + (1 << 20)) + (32 << 20)
    assert peak - before < bound, f"RSS grew by {(peak - before) >> 20} MiB (bound {bound >> 20} MiB)"
    for w in stalled:
        code, details = end_of(w.call)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
        m = STALLED.fullmatch(details)
        assert m, details
        assert 0 < int(m.group(1)) <= buffer_bytes + 2 * blob
    assert metric(d.metrics(), "cdcview_watchers", view="All") == 1
    assert metric(d.metrics(), "cdcview_watchers_cut_off_total", view="All", reason="fell_behind") == 0

    wait_for("the updates applied", lambda: d.positions("src").get("") == expected_position(stream_file))
    while len([e for e in good.events if e.WhichOneof("event") == "change"]) < len(updates):
        more = good.drain_for(1.0)
        assert more, "the good watcher stopped receiving changes"
    changes = [(e.change.op, e.change.entry.item.attributes["PK"].s,
                e.change.entry.item.attributes["v"].n)
               for e in good.events if e.WhichOneof("event") == "change"]
    assert changes == [(pb.vs.EntryChange.PUT, u["dynamodb"]["Keys"]["PK"]["S"], "1")
                       for u in updates]
    assert good.drain_for(0.3) == [] and good.error is None
    for c in channels:
        c.close()
    d.stop()
