"""The fast read port (server.fast_reads) with TLS and bearer tokens, on the real daemon:
reads over TLS answer as over plaintext; a plaintext client, a client without the client CA's
certificate (mTLS) and a client that never finishes its handshake are closed and counted; a
call without a token is UNAUTHENTICATED and one for a view its token may not read
PERMISSION_DENIED, with the exact messages and counters; a rotated certificate serves new
connections while open ones keep working.

Everything here talks to the fast read port only (and to /metrics: in plaintext, tls_metrics:
false, without tokens; over TLS with them): the main port's TLS and tokens are tested elsewhere.
"""

import socket
import ssl
import subprocess
import time
import urllib.request

import grpc

from conftest import parse_metrics, wait_for
from test_consistency import record
from test_tls import mount_secret
from tls_certs import SERVER2_SERIAL, SERVER_SERIAL

ORDERS_TOKEN = "orders-api-token-0123456789"
ADMIN_TOKEN = "admin-token-0123456789abcdef"
# May scrape /metrics, where the daemon asks tokens there too.
METRICS_TOKEN = "metrics-token-0123456789abc"
TOKENS_YAML = f"""
tokens:
  - name: orders-api
    token: "{ORDERS_TOKEN}"
    views: [ByDay]
  - name: admin
    token: "{ADMIN_TOKEN}"
    views: all
  - name: prometheus
    token: "{METRICS_TOKEN}"
    views: []
    metrics: true
"""
NO_TOKEN = ('no bearer token: send the header "authorization: Bearer <token>" '
            "(cdcview --token-file FILE)")
BAD_TOKEN = "the bearer token is not one of server.tokens_file's tokens"
DENIED = ('token "orders-api" may not read view "ByPk": add the view to its views in '
          "server.tokens_file")


def not_after(cert_path):
    """A certificate's notAfter, seconds since the epoch."""
    out = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-in", cert_path],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return ssl.cert_time_to_seconds(out.strip().split("=", 1)[1])


def daemon_config(stream, server):
    return {
        "sources": [{"name": "app", "table": "App", "file": {"path": stream, "follow": True}}],
        "tables": [{
            "name": "App",
            "key": {"partition": "PK"},
            "views": [{"name": "ByDay", "partition_key": {"attribute": "day", "type": "S"},
                       "sort_key": {"attribute": "PK", "type": "S"}},
                      {"name": "ByPk", "partition_key": {"attribute": "PK", "type": "S"}}],
        }],
        "server": dict({"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0",
                        "fast_reads": "127.0.0.1:0"}, **server),
    }


def tls_server(pki, **more):
    """The server block of TLS with the pki's first server pair, /metrics in plaintext."""
    return dict({"tls_cert_file": pki.server_cert, "tls_key_file": pki.server_key,
                 "tls_metrics": False}, **more)


def write_stream(tmp_path, count=3):
    stream = str(tmp_path / "app.ndjson")
    with open(stream, "w") as f:
        f.write("".join(record(n, f"I{n}", "D1") for n in range(count)))
    return stream


def start(daemon_factory, config):
    """Starts cdcviewd without waiting on the main port (it may speak TLS there)."""
    d = daemon_factory(config).start(wait_serving=False)
    assert d.fast_addr is not None, d.log()[-2000:]
    return d


def tls_channel(d, pki, client=None):
    """A channel of its own to the fast read port over TLS (with the client pair `client`:
    "client" or "other_client")."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki.read("ca_cert"),
        private_key=pki.read(f"{client}_key") if client else None,
        certificate_chain=pki.read(f"{client}_cert") if client else None)
    return grpc.secure_channel(d.fast_addr, credentials,
                               options=[("grpc.ssl_target_name_override", "localhost"),
                                        ("grpc.use_local_subchannel_pool", 1)])


def query(pb, channel, view="ByDay", key="D1", token=None):
    stub = pb.grpc.ViewServiceStub(channel)
    metadata = [("authorization", f"Bearer {token}")] if token else None
    request = pb.vs.QueryRequest(view=view, partition_key=pb.av.AttributeValue(s=key))
    return stub.Query(request, timeout=10, metadata=metadata)


def refusal(call):
    try:
        call()
    except grpc.RpcError as e:
        return e.code(), e.details()
    raise AssertionError("the call succeeded")


def metrics(d, token=None):
    """The daemon's metrics: over TLS verified with d.metrics_ca when set (a daemon with tokens),
    in plaintext otherwise."""
    ca = getattr(d, "metrics_ca", None)
    request = urllib.request.Request(f"{'https' if ca else 'http'}://127.0.0.1:{d.metrics_port}"
                                     "/metrics")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=ca) if ca else None
    with urllib.request.urlopen(request, timeout=10, context=context) as r:
        return parse_metrics(r.read().decode())


def value(all_metrics, name, **labels):
    """A metric's value, 0 when the series does not exist (yet)."""
    return all_metrics.get((name, frozenset(labels.items())), 0.0)


def wait_applied(pb, channel, count, token=None):
    def applied():
        try:
            return len(query(pb, channel, token=token).entries) == count
        except grpc.RpcError as e:  # views start BUILDING
            if "is being rebuilt" not in e.details():
                raise
            return False
    wait_for(f"{count} records applied", applied)


def peer_serial(d, pki):
    """The serial of the certificate the fast read port presents to a new connection."""
    context = ssl.create_default_context(cafile=pki.ca_cert)
    context.set_alpn_protocols(["h2"])
    host, port = d.fast_addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.selected_alpn_protocol() == "h2"
            return int(tls.getpeercert()["serialNumber"], 16)


def test_reads_over_tls_answer_as_over_plaintext(daemon_factory, pb, pki, tmp_path):
    stream = write_stream(tmp_path)
    d = start(daemon_factory, daemon_config(stream, {}))
    plain = grpc.insecure_channel(d.fast_addr)
    wait_applied(pb, plain, 3)
    over_plaintext = query(pb, plain)
    plain.close()
    d.stop()

    d.write_config(daemon_config(stream, tls_server(pki)))
    d.start(wait_serving=False)
    channel = tls_channel(d, pki)
    over_tls = query(pb, channel)
    assert over_tls.entries == over_plaintext.entries
    assert [e.item.attributes["PK"].s for e in over_tls.entries] == ["I0", "I1", "I2"]
    assert peer_serial(d, pki) == SERVER_SERIAL

    # A plaintext client gets nowhere, and the failed handshake is counted.
    plain = grpc.insecure_channel(d.fast_addr)
    code, _ = refusal(lambda: query(pb, plain))
    assert code == grpc.StatusCode.UNAVAILABLE
    plain.close()
    wait_for("the plaintext client's handshake counted", lambda: value(
        metrics(d), "cdcview_connections_closed_total", port="fast_reads",
        reason="tls_handshake") >= 1)
    # The TLS channel still works.
    assert len(query(pb, channel).entries) == 3
    channel.close()
    d.stop()
    assert "fast_reads TLS: serving the certificate of " + pki.server_cert in d.log()


def start_with_tokens(daemon_factory, pb, pki, tmp_path):
    """cdcviewd with TLS and TOKENS_YAML, its records applied; and a TLS channel to its fast
    read port."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)
    stream = write_stream(tmp_path)
    # With tokens /metrics is TLS too (a token is never sent in clear text).
    d = start(daemon_factory, daemon_config(stream, tls_server(pki, tokens_file=str(tokens),
                                                               tls_metrics=True)))
    d.metrics_ca = pki.ca_cert
    channel = tls_channel(d, pki)
    wait_applied(pb, channel, 3, token=ORDERS_TOKEN)
    return d, channel


def test_tokens_on_the_fast_read_port(daemon_factory, pb, pki, tmp_path):
    d, channel = start_with_tokens(daemon_factory, pb, pki, tmp_path)

    assert refusal(lambda: query(pb, channel)) == (grpc.StatusCode.UNAUTHENTICATED, NO_TOKEN)
    assert refusal(lambda: query(pb, channel, token="not-one-of-them-0123456789")) == (
        grpc.StatusCode.UNAUTHENTICATED, BAD_TOKEN)
    assert refusal(lambda: query(pb, channel, view="ByPk", key="I0", token=ORDERS_TOKEN)) == (
        grpc.StatusCode.PERMISSION_DENIED, DENIED)
    assert len(query(pb, channel, view="ByPk", key="I0", token=ADMIN_TOKEN).entries) == 1
    assert len(query(pb, channel, token=ORDERS_TOKEN).entries) == 3

    m = metrics(d, METRICS_TOKEN)
    refused = {reason: value(m, "cdcview_auth_refused_total", port="fast_reads", reason=reason)
               for reason in ("no_token", "bad_token", "view_denied")}
    assert refused == {"no_token": 1, "bad_token": 1, "view_denied": 1}
    channel.close()
    d.stop()


def test_mtls_refuses_a_client_without_the_cas_certificate(daemon_factory, pb, pki, tmp_path):
    stream = write_stream(tmp_path)
    d = start(daemon_factory,
              daemon_config(stream, tls_server(pki, tls_client_ca_file=pki.ca_cert)))
    with_cert = tls_channel(d, pki, client="client")
    wait_applied(pb, with_cert, 3)
    for client in (None, "other_client"):
        channel = tls_channel(d, pki, client=client)
        code, _ = refusal(lambda: query(pb, channel))
        assert code == grpc.StatusCode.UNAVAILABLE, client
        channel.close()
    wait_for("both failed handshakes counted", lambda: value(
        metrics(d), "cdcview_connections_closed_total", port="fast_reads",
        reason="tls_handshake") == 2)
    assert len(query(pb, with_cert).entries) == 3
    with_cert.close()
    d.stop()


def test_a_rotated_certificate_serves_new_connections(daemon_factory, pb, pki, tmp_path):
    # The Secret's files, swapped at once through ..data as a Secret volume's update does.
    tls_dir = tmp_path / "tls"
    mount_secret(tls_dir, pki.server_cert, pki.server_key)
    cert, key = str(tls_dir / "tls.crt"), str(tls_dir / "tls.key")
    stream = write_stream(tmp_path)
    d = start(daemon_factory, daemon_config(stream, {
        "tls_cert_file": cert, "tls_key_file": key, "tls_metrics": False}))
    before = tls_channel(d, pki)
    wait_applied(pb, before, 3)
    assert peer_serial(d, pki) == SERVER_SERIAL

    # A half-written certificate is not taken: new connections keep the old one.
    with open(pki.server2_cert) as f:
        pem = f.read()
    half = tmp_path / "half.crt"
    half.write_text(pem[:len(pem) // 2])
    mount_secret(tls_dir, half, pki.server_key)
    # The files are looked at when a connection comes (at most once a second): connect until
    # the failed reload is counted.
    wait_for("the failed reload counted", lambda: peer_serial(d, pki) == SERVER_SERIAL and value(
        metrics(d), "cdcview_tls_reloads_total", port="fast_reads", result="failed") == 1,
        interval=0.2)
    assert peer_serial(d, pki) == SERVER_SERIAL

    # The whole new pair: new connections get it.
    mount_secret(tls_dir, pki.server2_cert, pki.server2_key)
    wait_for("the new certificate served", lambda: peer_serial(d, pki) == SERVER2_SERIAL)
    m = metrics(d)
    assert value(m, "cdcview_tls_reloads_total", port="fast_reads", result="ok") == 1
    assert value(m, "cdcview_tls_reloads_total", port="fast_reads", result="failed") == 1
    assert value(m, "cdcview_tls_certificate_expiry_timestamp_seconds",
                 port="fast_reads") == not_after(pki.server2_cert)

    # The connection opened before still works, on the same connection.
    opened = value(m, "cdcview_connections_opened_total", port="fast_reads")
    assert len(query(pb, before).entries) == 3
    assert value(metrics(d), "cdcview_connections_opened_total", port="fast_reads") == opened
    before.close()
    d.stop()


def test_a_handshake_that_never_finishes_is_closed_at_the_request_timeout(
        daemon_factory, pb, pki, tmp_path):
    stream = write_stream(tmp_path)
    d = start(daemon_factory,
              daemon_config(stream, tls_server(pki, fast_reads_request_timeout_ms=500)))
    host, port = d.fast_addr.rsplit(":", 1)
    silent = socket.create_connection((host, int(port)), timeout=10)
    started = time.monotonic()
    assert silent.recv(1) == b""  # closed without a byte: nothing can be said before TLS
    took = time.monotonic() - started
    silent.close()
    assert 0.45 <= took < 3, took
    # Counted just after the close.
    wait_for("the closed connection counted", lambda: value(
        metrics(d), "cdcview_connections_closed_total", port="fast_reads",
        reason="request_timeout") == 1)
    assert value(metrics(d), "cdcview_connections_closed_total", port="fast_reads",
                 reason="tls_handshake") == 0
    # Clients that complete theirs are served.
    channel = tls_channel(d, pki)
    wait_applied(pb, channel, 3)
    channel.close()
    d.stop()


def test_both_read_ports_refuse_and_answer_alike(daemon_factory, pb, pki, tmp_path):
    d, fast = start_with_tokens(daemon_factory, pb, pki, tmp_path)
    main = grpc.secure_channel(d.addr, grpc.ssl_channel_credentials(
        root_certificates=pki.read("ca_cert")),
        options=[("grpc.ssl_target_name_override", "localhost")])

    def outcome(channel, method, request, token):
        stub = pb.grpc.ViewServiceStub(channel)
        metadata = [("authorization", f"Bearer {token}")] if token else None
        try:
            answer = getattr(stub, method)(request, timeout=10, metadata=metadata)
        except grpc.RpcError as e:
            return e.code(), e.details()
        if method == "ListViews":
            return sorted(v.name for v in answer.views)
        return "ok"

    key = pb.av.Item(attributes={"PK": pb.av.AttributeValue(s="I0")})
    calls = [
        ("Query", pb.vs.QueryRequest(view="ByDay", partition_key=pb.av.AttributeValue(s="D1")),
         None),
        ("Query", pb.vs.QueryRequest(view="ByDay", partition_key=pb.av.AttributeValue(s="D1")),
         "not-one-of-them-0123456789"),
        ("Query", pb.vs.QueryRequest(view="ByPk", partition_key=pb.av.AttributeValue(s="I0")),
         ORDERS_TOKEN),
        ("DescribeView", pb.vs.DescribeViewRequest(view="ByPk"), ORDERS_TOKEN),
        ("GetItem", pb.vs.GetItemRequest(table="App", key=key), ORDERS_TOKEN),
        ("GetItem", pb.vs.GetItemRequest(table="App", key=key), ADMIN_TOKEN),
        ("ListViews", pb.vs.ListViewsRequest(), ORDERS_TOKEN),
        ("ListViews", pb.vs.ListViewsRequest(), ADMIN_TOKEN),
        ("GetStatus", pb.vs.GetStatusRequest(), ORDERS_TOKEN),
    ]
    on_main = [outcome(main, *call) for call in calls]
    on_fast = [outcome(fast, *call) for call in calls]
    assert on_fast == on_main
    assert on_fast[:3] == [(grpc.StatusCode.UNAUTHENTICATED, NO_TOKEN),
                           (grpc.StatusCode.UNAUTHENTICATED, BAD_TOKEN),
                           (grpc.StatusCode.PERMISSION_DENIED, DENIED)]
    assert on_fast[4] == (grpc.StatusCode.PERMISSION_DENIED,
                          'token "orders-api" may not read table "App"\'s items: only a token '
                          "with views: all may (server.tokens_file)")
    assert on_fast[5:] == ["ok", ["ByDay"], ["ByDay", "ByPk"], "ok"]
    main.close()
    fast.close()
    d.stop()
