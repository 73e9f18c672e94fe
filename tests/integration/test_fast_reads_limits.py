"""The fast read port (server.fast_reads) against hostile and careless clients, on the real
daemon: request bytes held for unfinished requests are bounded per call, per connection and in
total; reads waiting for a far-future position neither delay a read whose position is applied
nor wait past server.max_wait_ms, and are capped per connection; connections are capped, and
idle or slowly sent ones are closed. Each limit is named in what the client gets and counted in
the cdcview_connections_* and cdcview_requests_refused_total metrics.

Hostile clients speak raw HTTP/2 over a socket (RawH2 below); well-behaved ones use grpcio.
"""

import json
import socket
import time

import grpc
import pytest

from conftest import expected_position, metric, wait_for
from test_consistency import fnv1a32, rss_kib, varint

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS = 1, 1, 4
NO_ERROR, ENHANCE_YOUR_CALM = 0, 11
MiB = 1 << 20


def frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def hpack_length(n):
    """An HPACK integer with a 7-bit prefix (the string length, no Huffman coding)."""
    if n < 127:
        return bytes([n])
    out, n = bytearray([127]), n - 127
    while n >= 128:
        out.append((n & 127) | 128)
        n >>= 7
    out.append(n)
    return bytes(out)


def header_block(method):
    """A gRPC call's request headers, each a literal without indexing."""
    block = b""
    for name, value in ((":method", "POST"), (":scheme", "http"), (":authority", "localhost"),
                        (":path", f"/cdcview.v1.ViewService/{method}"),
                        ("content-type", "application/grpc"), ("te", "trailers")):
        block += b"\x00" + hpack_length(len(name)) + name.encode() + hpack_length(len(value)) + value.encode()
    return block


class RawH2:
    """One HTTP/2 client connection written by hand, honouring the server's flow control."""

    def __init__(self, addr, preface=True):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.buffer = b""
        self.frames = []
        self.closed = False
        self.window = 65535  # the connection's send window
        self.initial_window = 65535
        self.windows = {}  # stream -> its send window
        self.ended = set()  # streams the server ended (an answer with END_STREAM, or a reset)
        self.preface = preface  # a client that sent none acknowledges nothing either
        if preface:
            self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
            self.read_until(lambda: any(f[0] == SETTINGS for f in self.frames), "SETTINGS")

    def read(self, timeout):
        """Reads what arrives within `timeout`; False once nothing did or the server closed."""
        if self.closed:
            return False
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 16)
        except (socket.timeout, BlockingIOError):
            return False
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return False
        self.buffer += data
        while len(self.buffer) >= 9:
            n = int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < 9 + n:
                break
            kind, flags = self.buffer[3], self.buffer[4]
            stream = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
            payload, self.buffer = self.buffer[9:9 + n], self.buffer[9 + n:]
            self.on_frame(kind, flags, stream, payload)
        return True

    def on_frame(self, kind, flags, stream, payload):
        self.frames.append((kind, flags, stream, payload))
        if kind == SETTINGS and not flags & ACK:
            for i in range(0, len(payload), 6):
                if int.from_bytes(payload[i:i + 2], "big") == 4:  # INITIAL_WINDOW_SIZE
                    value = int.from_bytes(payload[i + 2:i + 6], "big")
                    for s in self.windows:
                        self.windows[s] += value - self.initial_window
                    self.initial_window = value
            if self.preface:
                self.sock.sendall(frame(SETTINGS, ACK, 0))
        elif kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
            if stream == 0:
                self.window += increment
            else:
                self.windows[stream] = self.windows.get(stream, self.initial_window) + increment
        elif (kind == HEADERS and flags & END_STREAM) or kind == RST_STREAM:
            self.ended.add(stream)

    def read_until(self, predicate, what, timeout=10):
        deadline = time.monotonic() + timeout
        while not predicate():
            left = deadline - time.monotonic()
            assert left > 0 and not self.closed, f"no {what} within {timeout} s: {self.frames[-5:]}"
            self.read(min(left, 0.5))

    def open_stream(self, stream, method="Query", end_headers=True):
        self.windows[stream] = self.initial_window
        self.sock.sendall(frame(HEADERS, END_HEADERS if end_headers else 0, stream,
                                header_block(method)))

    def send_data(self, stream, data, end=False):
        """Sends `data` on `stream` as the windows allow; stops early once the server ended
        the stream (the rest would be dropped). True if all of it went."""
        while data:
            if stream in self.ended:
                return False
            room = min(self.window, self.windows[stream], 16384, len(data))
            if room <= 0:
                self.read(0.2)
                continue
            self.sock.sendall(frame(DATA, 0, stream, data[:room]))
            self.window -= room
            self.windows[stream] -= room
            data = data[room:]
            self.read(0)
        if end:
            self.sock.sendall(frame(DATA, END_STREAM, stream))
        return True

    def goaway(self):
        """(error code, debug text) of the server's GOAWAY; None if it sent none."""
        for kind, _, _, payload in self.frames:
            if kind == GOAWAY:
                return int.from_bytes(payload[4:8], "big"), payload[8:].decode()
        return None

    def wait_closed(self, timeout):
        deadline = time.monotonic() + timeout
        while not self.closed and time.monotonic() < deadline:
            self.read(min(0.2, max(0.0, deadline - time.monotonic())))
        return self.closed

    def close(self):
        self.sock.close()


def record(n, pk, day):
    return json.dumps({
        "eventID": f"e{n}", "eventName": "INSERT",
        "dynamodb": {"ApproximateCreationDateTime": time.time(), "Keys": {"PK": {"S": pk}},
                     "NewImage": {"PK": {"S": pk}, "day": {"S": day}},
                     "SequenceNumber": str(1000 + n)},
    }) + "\n"


def start_daemon(daemon_factory, tmp_path, **server):
    """A daemon with the fast read port and `server`'s fields, three records applied."""
    stream = str(tmp_path / "a.ndjson")
    with open(stream, "w") as f:
        f.write("".join(record(n, f"I{n}", "D1") for n in range(3)))
    d = daemon_factory({
        "storage": {"path": str(tmp_path / "store"), "map_size": "64MiB"},
        "server": {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0", "fast_reads": "127.0.0.1:0",
                   **server},
        "sources": [{"name": "app", "table": "App", "file": {"path": stream, "follow": True}}],
        "tables": [{"name": "App", "key": {"partition": "PK"},
                    "views": [{"name": "ByDay",
                               "partition_key": {"attribute": "day", "type": "S"}}]}],
    }).start()
    assert d.fast_addr is not None, d.log()[-2000:]
    wait_for("the records to apply", lambda: d.positions("app").get("") == expected_position(stream))
    return d


def fast_stub(d, pb):
    """A stub on its own connection to the fast read port (no subchannel shared)."""
    channel = grpc.insecure_channel(d.fast_addr, options=[("grpc.use_local_subchannel_pool", 1)])
    return channel, pb.grpc.ViewServiceStub(channel)


def day_query(pb, day="D1", **consistency):
    return pb.vs.QueryRequest(view="ByDay", partition_key=pb.av.AttributeValue(s=day),
                              consistency=pb.vs.ReadConsistency(**consistency))


def fast(metrics, name, **labels):
    return metric(metrics, name, port="fast_reads", **labels)


def grpc_prefix(length):
    return b"\x00" + length.to_bytes(4, "big")


def test_unfinished_request_bodies_are_bounded(daemon_factory, pb, tmp_path):
    request_limit, per_connection, total = 16 * MiB, 8 * MiB, 20 * MiB
    d = start_daemon(daemon_factory, tmp_path, fast_reads_max_request_bytes="16MiB",
                     fast_reads_max_buffered_per_connection="8MiB",
                     fast_reads_max_buffered_bytes="20MiB")
    channel, stub = fast_stub(d, pb)

    def refusal(view_bytes):
        with pytest.raises(grpc.RpcError) as err:
            stub.Query(pb.vs.QueryRequest(view="v" * view_bytes), timeout=30)
        return err.value.code(), err.value.details()

    # One request over the per-call limit, one over the connection's.
    assert refusal(17 * MiB) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"the request is larger than {request_limit} bytes (server.fast_reads_max_request_bytes)")
    assert refusal(9 * MiB) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"this connection's unfinished requests would hold more than {per_connection} bytes "
        "(server.fast_reads_max_buffered_per_connection); send fewer large requests at once")

    pid = d.proc.pid
    rss_before, peak_before = rss_kib(pid, "VmRSS"), rss_kib(pid, "VmHWM")
    # Hostile clients: 16 calls per connection, each announcing a 4 MiB message and sending
    # 3 MiB of it, never the rest. Each connection holds two (6 MiB); the other 14 are refused.
    body = grpc_prefix(4 * MiB) + bytes(3 * MiB)
    clients = []
    for c in range(3):
        h2 = RawH2(d.fast_addr)
        clients.append(h2)
        for stream in range(1, 33, 2):
            h2.open_stream(stream)
            h2.send_data(stream, body)
        h2.read_until(lambda: len(h2.ended) == 14, f"14 refusals on connection {c}")
        assert h2.ended == set(range(5, 33, 2))
    # 18 MiB held: a call on another connection that would pass 20 MiB is refused by the total.
    assert refusal(3 * MiB) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"the fast read port's unfinished requests would hold more than {total} bytes "
        "(server.fast_reads_max_buffered_bytes); retry with backoff")
    h2 = RawH2(d.fast_addr)
    clients.append(h2)
    for stream in range(1, 33, 2):
        h2.open_stream(stream)
        h2.send_data(stream, body)
    h2.read_until(lambda: len(h2.ended) == 16, "16 refusals on the fourth connection")

    rss_after, peak_after = rss_kib(pid, "VmRSS"), rss_kib(pid, "VmHWM")
    print(f"VmRSS {rss_before} -> {rss_after} KiB, VmHWM {peak_before} -> {peak_after} KiB")
    # What the limits allow, plus room for the refused calls' chunks in flight and the heap.
    bound_kib = (total + 32 * MiB) // 1024
    assert rss_after - rss_before < bound_kib
    assert peak_after - peak_before < bound_kib
    m = d.metrics()
    assert fast(m, "cdcview_requests_refused_total", reason="body_limit") == 3 + 3 * 14 + 16
    assert fast(m, "cdcview_connections_open") == 5
    # The port still answers, and the held bytes go with their connections.
    assert len(stub.Query(day_query(pb), timeout=10).entries) == 3
    for h2 in clients:
        h2.close()
    wait_for("the raw connections to close",
             lambda: fast(d.metrics(), "cdcview_connections_open") == 1)
    assert fast(d.metrics(), "cdcview_connections_closed_total", reason="client") == 4
    # Their bytes are free again: a 7 MiB call fits and reaches the reader (which refuses the
    # name, not the size).
    assert refusal(7 * MiB)[0] == grpc.StatusCode.INVALID_ARGUMENT
    channel.close()
    d.stop()


def position_token(entries):
    """A sealed position token of (source, partition, position) entries, as the daemon seals
    AppliedPosition.token."""
    body = b"cp\x01" + varint(len(entries))
    for fields in entries:
        for text in fields:
            body += varint(len(text)) + text.encode()
    return body + fnv1a32(body).to_bytes(4, "little")


def test_far_future_waits_neither_delay_applied_reads_nor_outlive_the_cap(
        daemon_factory, pb, tmp_path):
    d = start_daemon(daemon_factory, tmp_path, max_wait_ms=3000,
                     fast_reads_max_waits_per_connection=4)
    channel, stub = fast_stub(d, pb)
    applied = stub.Query(day_query(pb), timeout=10).applied
    at = applied.entries[0].position
    assert position_token([("app", "", at)]) == applied.token  # the encoding above is the daemon's
    far = "999999999:1000000"
    forged = position_token([("app", "", far)])

    # Four connections, four reads each that wait for a position the stream never reaches and
    # give no deadline: twice as many waits as the port has wait threads.
    channels = [fast_stub(d, pb) for _ in range(4)]
    start = time.monotonic()
    waits = [s.Query.future(day_query(pb, min_position=forged)) for _, s in channels for _ in range(4)]
    time.sleep(0.5)  # all of them are waiting
    assert not any(w.done() for w in waits)
    # A read whose position is applied is answered at once, on any connection.
    for s in [stub] + [s for _, s in channels]:
        t = time.monotonic()
        assert len(s.Query(day_query(pb, min_position=applied.token), timeout=10).entries) == 3
        assert time.monotonic() - t < 1.0
    # A fifth wait on a connection is refused by name.
    with pytest.raises(grpc.RpcError) as err:
        channels[0][1].Query(day_query(pb, min_position=forged), timeout=10)
    assert (err.value.code(), err.value.details()) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "4 reads on this connection are already waiting for their position "
        "(server.fast_reads_max_waits_per_connection); retry with backoff")
    assert fast(d.metrics(), "cdcview_requests_refused_total", reason="waits_per_connection") == 1

    # Without a deadline they end at server.max_wait_ms, answered as the main port answers.
    expected = (
        "view ByDay: min_position not applied before the deadline (the request had none; the "
        f"server waits at most 3 s, server.max_wait_ms): source app: applied up to {at}, "
        f"waiting for {far}")
    for w in waits:
        with pytest.raises(grpc.RpcError) as err:
            w.result(timeout=30)
        assert (err.value.code(), err.value.details()) == (grpc.StatusCode.DEADLINE_EXCEEDED,
                                                           expected)
    took = time.monotonic() - start
    assert 3.0 <= took < 5.0
    t = time.monotonic()
    with pytest.raises(grpc.RpcError) as err:
        d.stub.Query(day_query(pb, min_position=forged))
    assert (err.value.code(), err.value.details()) == (grpc.StatusCode.DEADLINE_EXCEEDED, expected)
    assert 3.0 <= time.monotonic() - t < 5.0
    for c, _ in channels + [(channel, None)]:
        c.close()
    d.stop()


def test_connections_over_the_cap_are_refused_and_counted(daemon_factory, pb, tmp_path):
    d = start_daemon(daemon_factory, tmp_path, fast_reads_max_connections=3)
    held = [RawH2(d.fast_addr) for _ in range(3)]
    wait_for("three connections open", lambda: fast(d.metrics(), "cdcview_connections_open") == 3)
    # The fourth gets the server's SETTINGS and a GOAWAY naming the limit, then is closed.
    over = RawH2(d.fast_addr, preface=False)
    assert over.wait_closed(10)
    assert [f[0] for f in over.frames] == [SETTINGS, GOAWAY]
    assert over.goaway() == (ENHANCE_YOUR_CALM,
                             "the fast read port has 3 connections open, its limit "
                             "(server.fast_reads_max_connections); retry later")
    m = d.metrics()
    assert fast(m, "cdcview_connections_refused_total", reason="max_connections") == 1
    assert fast(m, "cdcview_connections_opened_total") == 3
    assert fast(m, "cdcview_connections_open") == 3
    assert "fast read port: the fast read port has 3 connections open" in d.log()
    # A gRPC client is refused the same way (as often as it retries), and fails its call.
    channel, stub = fast_stub(d, pb)
    with pytest.raises(grpc.RpcError) as err:
        stub.Query(day_query(pb), timeout=2)
    assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    channel.close()
    assert fast(d.metrics(), "cdcview_connections_refused_total", reason="max_connections") >= 2

    # Once one closes, a fresh client is served.
    held.pop().close()
    wait_for("the closed connection to be counted",
             lambda: fast(d.metrics(), "cdcview_connections_open") == 2)
    channel, stub = fast_stub(d, pb)
    assert len(stub.Query(day_query(pb), timeout=10).entries) == 3
    m = d.metrics()
    assert fast(m, "cdcview_connections_opened_total") == 4
    assert fast(m, "cdcview_connections_closed_total", reason="client") == 1
    channel.close()
    for h2 in held:
        h2.close()
    d.stop()


def test_idle_connections_are_closed_after_the_timeout(daemon_factory, pb, tmp_path):
    d = start_daemon(daemon_factory, tmp_path, fast_reads_idle_timeout_ms=1000)
    h2 = RawH2(d.fast_addr)
    start = time.monotonic()
    # A call keeps it busy only while it is open: the clock starts again when it ends.
    h2.open_stream(1)
    request = day_query(pb).SerializeToString()
    h2.send_data(1, grpc_prefix(len(request)) + request, end=True)
    h2.read_until(lambda: 1 in h2.ended, "the answer")
    answered = time.monotonic()
    assert h2.wait_closed(5)
    closed = time.monotonic()
    assert 1.0 <= closed - answered < 2.0, (closed - start, closed - answered)
    assert h2.goaway() == (NO_ERROR, "no call for 1000 ms (server.fast_reads_idle_timeout_ms)")
    m = d.metrics()
    assert fast(m, "cdcview_connections_closed_total", reason="idle") == 1
    assert fast(m, "cdcview_connections_open") == 0
    # A gRPC client whose connection went idle reconnects on its next call.
    channel, stub = fast_stub(d, pb)
    assert len(stub.Query(day_query(pb), timeout=10).entries) == 3
    time.sleep(1.5)
    assert len(stub.Query(day_query(pb), timeout=10).entries) == 3
    assert fast(d.metrics(), "cdcview_connections_closed_total", reason="idle") == 2
    channel.close()
    d.stop()


def test_slow_clients_are_closed_after_the_request_timeout(daemon_factory, pb, tmp_path):
    d = start_daemon(daemon_factory, tmp_path, fast_reads_request_timeout_ms=1000)
    channel, stub = fast_stub(d, pb)
    assert len(stub.Query(day_query(pb), timeout=10).entries) == 3  # a client that keeps up

    opened = time.monotonic()
    nothing = RawH2(d.fast_addr, preface=False)  # connects and sends nothing
    half_preface = RawH2(d.fast_addr, preface=False)
    half_preface.sock.sendall(PREFACE[:10])
    half_headers = RawH2(d.fast_addr)  # HEADERS without END_HEADERS, no CONTINUATION
    half_headers.open_stream(1, end_headers=False)
    half_body = RawH2(d.fast_addr)  # a message announced, half sent, never ended
    half_body.open_stream(1)
    half_body.send_data(1, grpc_prefix(100) + bytes(50))
    slow = [nothing, half_preface, half_headers, half_body]
    for h2 in slow:
        assert h2.wait_closed(5)
        assert h2.goaway() == (ENHANCE_YOUR_CALM,
                               "the preface or a request took longer than 1000 ms to arrive "
                               "(server.fast_reads_request_timeout_ms)")
    assert 1.0 <= time.monotonic() - opened < 2.5
    m = d.metrics()
    assert fast(m, "cdcview_connections_closed_total", reason="request_timeout") == 4
    assert fast(m, "cdcview_connections_opened_total") == 5
    assert fast(m, "cdcview_connections_open") == 1
    # The client that kept up is still served on its connection.
    assert len(stub.Query(day_query(pb), timeout=10).entries) == 3
    assert fast(d.metrics(), "cdcview_connections_opened_total") == 5
    channel.close()
    d.stop()
