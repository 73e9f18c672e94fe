"""TLS, bearer tokens and the plaintext health port on the main gRPC port, against the real
daemon: a client without credentials reads nothing, a token reads the views it lists and no
other, mTLS refuses a client without a certificate of the configured CA, the tokens file and the
certificate are reloaded while connections stay open, and the kubelet's plaintext probes answer
on server.health."""

import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request

import grpc
import pytest

import reference as ref
from conftest import DAEMON_BIN, SAMPLE, expected_position, health, parse_metrics, wait_for
from tls_certs import SERVER2_SERIAL, SERVER_SERIAL, serial_of

NO_TOKEN = ('no bearer token: send the header "authorization: Bearer <token>" '
            '(cdcview --token-file FILE)')
BAD_TOKEN = "the bearer token is not one of server.tokens_file's tokens"
ORDERS = "orders-token-0123456789"
ADMIN = "admin-token-abcdefghijk"
SCRAPER = "scraper-token-0123456789"


def denied(view, name="orders-api"):
    return (f'token "{name}" may not read view "{view}": add the view to its views in '
            f'server.tokens_file')


def write_tokens(path, entries):
    """Writes a tokens file through a rename, as a Secret update swaps its files."""
    lines = ["tokens:"]
    for name, token, views in entries:
        lines += [f"  - name: {name}", f'    token: "{token}"',
                  f"    views: {views if views == 'all' else '[' + ', '.join(views) + ']'}",
                  "    metrics: true"]
    tmp = f"{path}.new"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def mount_secret(mount, cert, key):
    """Lays out or updates `mount` as the kubelet does a Secret volume: tls.crt and tls.key are
    links through ..data to a directory of this version, and an update swaps ..data at once."""
    mount.mkdir(exist_ok=True)
    version = mount / f"..version-{len(list(mount.glob('..version-*')))}"
    version.mkdir()
    shutil.copy(cert, version / "tls.crt")
    shutil.copy(key, version / "tls.key")
    os.symlink(version.name, mount / "..data.new")
    os.replace(mount / "..data.new", mount / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (mount / name).is_symlink():
            os.symlink(f"..data/{name}", mount / name)


def not_after(pem_path):
    p = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-in", pem_path],
                       capture_output=True, text=True, check=True, timeout=60)
    return ssl.cert_time_to_seconds(p.stdout.strip().split("=", 1)[1])


def config_for(pki, tmp_path, tokens=None, client_ca=False):
    mount = tmp_path / "tls"
    server = {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0", "health": "127.0.0.1:0",
              "tls_cert_file": str(mount / "tls.crt"), "tls_key_file": str(mount / "tls.key")}
    mount_secret(mount, pki.server_cert, pki.server_key)
    if client_ca:
        server["tls_client_ca_file"] = pki.ca_cert
    if tokens is None:
        server["tls_metrics"] = False  # /metrics in plaintext, without tokens
    else:
        # With tokens /metrics is TLS too (a token is never sent in clear text): the test sets
        # d.metrics_ca for metrics() below.
        server["tokens_file"] = str(tmp_path / "tokens.yaml")
        write_tokens(server["tokens_file"], tokens)
    return {"sources": [{"name": "src", "table": "App", "file": {"path": SAMPLE}}],
            "tables": [ref.EXAMPLE_TABLE], "server": server}


def health_port(d):
    return int(wait_for("the health port's log line",
                        lambda: _health_line(d)))


def _health_line(d):
    for line in d.log().splitlines():
        if "grpc.health.v1.Health (plaintext) on port " in line:
            return line.rsplit(" ", 1)[1]
    return None


def start(daemon_factory, config):
    d = daemon_factory(config)
    d.start(wait_serving=False)
    d.health_addr = f"127.0.0.1:{health_port(d)}"
    with grpc.insecure_channel(d.health_addr) as channel:
        wait_for("SERVING on the health port", lambda: health(channel, "") == 1,
                 describe=lambda: d.log()[-2000:])
    return d


def tls_channel(pki, d, client=False, client_pair=("client_cert", "client_key")):
    kwargs = {"root_certificates": pki.read("ca_cert")}
    if client:
        kwargs["certificate_chain"] = pki.read(client_pair[0])
        kwargs["private_key"] = pki.read(client_pair[1])
    # A connection of its own per channel (grpcio otherwise shares one per target).
    return grpc.secure_channel(d.addr, grpc.ssl_channel_credentials(**kwargs),
                               options=[("grpc.use_local_subchannel_pool", 1)])


def bearer(token):
    return [("authorization", f"Bearer {token}")]


def code_and_message(call):
    try:
        call()
    except grpc.RpcError as e:
        return e.code(), e.details()
    return grpc.StatusCode.OK, None


def metrics(d, token=SCRAPER):
    """The daemon's metrics: over TLS verified with d.metrics_ca when the test set it (a daemon
    with tokens), in plaintext otherwise."""
    ca = getattr(d, "metrics_ca", None)
    request = urllib.request.Request(f"{'https' if ca else 'http'}://127.0.0.1:{d.metrics_port}"
                                     "/metrics", headers={"Authorization": f"Bearer {token}"})
    context = ssl.create_default_context(cafile=ca) if ca else None
    with urllib.request.urlopen(request, timeout=10, context=context) as r:
        return parse_metrics(r.read().decode())


def refused(d, reason):
    return metrics(d).get(("cdcview_auth_refused_total",
                           frozenset({("port", "grpc"), ("reason", reason)})))


def scan_gsi1(pb, stub, token):
    return stub.Scan(pb.vs.ScanRequest(view="GSI1"), metadata=bearer(token), timeout=10)


def presented_serial(port):
    """The serial of the certificate the server presents to a new TLS connection."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            return serial_of(ssl.DER_cert_to_PEM_cert(tls.getpeercert(binary_form=True)).encode())


def test_without_credentials_nothing_is_readable_and_tokens_read_their_views(
        daemon_factory, pki, pb, tmp_path):
    d = start(daemon_factory, config_for(pki, tmp_path, tokens=[
        ("orders-api", ORDERS, ["GSI1", "OrderTotals"]), ("admin", ADMIN, "all"),
        ("scraper", SCRAPER, [])]))
    d.metrics_ca = pki.ca_cert

    # Plaintext on the TLS port: the handshake fails, nothing is answered.
    with grpc.insecure_channel(d.addr) as plain:
        stub = pb.grpc.ViewServiceStub(plain)
        code, _ = code_and_message(lambda: stub.ListViews(pb.vs.ListViewsRequest(), timeout=5))
        assert code == grpc.StatusCode.UNAVAILABLE

    with tls_channel(pki, d) as channel:
        stub = pb.grpc.ViewServiceStub(channel)
        # No token, on every service: views, health, reflection.
        assert code_and_message(lambda: stub.Scan(pb.vs.ScanRequest(view="GSI1"), timeout=10)) == (
            grpc.StatusCode.UNAUTHENTICATED, NO_TOKEN)
        assert code_and_message(lambda: stub.GetStatus(pb.vs.GetStatusRequest(), timeout=10)) == (
            grpc.StatusCode.UNAUTHENTICATED, NO_TOKEN)
        assert health(channel, "") == grpc.StatusCode.UNAUTHENTICATED
        reflection = channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
        list_services = b"\x3a\x00"  # list_services: ""
        assert code_and_message(lambda: list(reflection(iter([list_services]), timeout=10))) == (
            grpc.StatusCode.UNAUTHENTICATED, NO_TOKEN)
        # A token that is not in the file.
        assert code_and_message(lambda: scan_gsi1(pb, stub, "not-a-token-0123456789")) == (
            grpc.StatusCode.UNAUTHENTICATED, BAD_TOKEN)

        # orders-api reads GSI1 and the OrderTotals aggregate, nothing else.
        want = expected_position(SAMPLE)
        wait_for("the sample applied", lambda: [p.position for p in stub.GetStatus(
            pb.vs.GetStatusRequest(), metadata=bearer(ORDERS), timeout=10).sources[0].positions]
            == [want])
        mine = scan_gsi1(pb, stub, ORDERS)
        everything = scan_gsi1(pb, stub, ADMIN)
        assert len(mine.entries) > 0 and mine == everything
        assert code_and_message(lambda: stub.Scan(pb.vs.ScanRequest(view="OpenOrders"),
                                                  metadata=bearer(ORDERS), timeout=10)) == (
            grpc.StatusCode.PERMISSION_DENIED, denied("OpenOrders"))
        assert code_and_message(lambda: stub.DescribeView(pb.vs.DescribeViewRequest(
            view="ByMember"), metadata=bearer(ORDERS), timeout=10)) == (
            grpc.StatusCode.PERMISSION_DENIED, denied("ByMember"))
        assert code_and_message(lambda: next(stub.Watch(pb.vs.WatchRequest(view="ByScore"),
                                                        metadata=bearer(ORDERS), timeout=10))) == (
            grpc.StatusCode.PERMISSION_DENIED, denied("ByScore"))
        assert code_and_message(lambda: stub.ListAggregates(pb.vs.ListAggregatesRequest(
            aggregate="VotesPerDay"), metadata=bearer(ORDERS), timeout=10)) == (
            grpc.StatusCode.PERMISSION_DENIED, denied("VotesPerDay"))
        assert stub.ListAggregates(pb.vs.ListAggregatesRequest(aggregate="OrderTotals"),
                                   metadata=bearer(ORDERS), timeout=10).groups
        assert code_and_message(lambda: stub.GetItem(pb.vs.GetItemRequest(table="App"),
                                                     metadata=bearer(ORDERS), timeout=10)) == (
            grpc.StatusCode.PERMISSION_DENIED,
            'token "orders-api" may not read table "App"\'s items: only a token with views: all '
            'may (server.tokens_file)')
        backup = channel.unary_unary("/cdcview.v1.AdminService/Backup")
        assert code_and_message(lambda: backup(b"", metadata=bearer(ORDERS), timeout=10)) == (
            grpc.StatusCode.PERMISSION_DENIED,
            'token "orders-api" may not read a backup of the store: only a token with views: all '
            'may (server.tokens_file)')
        # ListViews shows a token only the views it may read.
        assert [v.name for v in stub.ListViews(pb.vs.ListViewsRequest(), metadata=bearer(ORDERS),
                                               timeout=10).views] == ["GSI1"]
        assert sorted(v.name for v in stub.ListViews(
            pb.vs.ListViewsRequest(), metadata=bearer(ADMIN), timeout=10).views) == sorted(
            ref.EXAMPLE_VIEWS)
        # Health and reflection with a token.
        assert channel.unary_unary("/grpc.health.v1.Health/Check")(
            b"", metadata=bearer(ORDERS), timeout=5) == b"\x08\x01"
        answers = list(reflection(iter([list_services]), metadata=bearer(ORDERS), timeout=10))
        assert b"cdcview.v1.ViewService" in answers[0]

    assert refused(d, "no_token") == 4
    assert refused(d, "bad_token") == 1
    assert refused(d, "view_denied") == 6

    # The health port: plaintext, health only, the main port's statuses.
    with grpc.insecure_channel(d.health_addr) as plain:
        assert health(plain, "") == 1
        assert health(plain, "cdcview.v1.ViewService") == 1
        wait_for("view GSI1 SERVING on the health port",
                 lambda: health(plain, "cdcview.view.GSI1") == 1)
        assert health(plain, "cdcview.view.NoSuchView") == grpc.StatusCode.NOT_FOUND
        stub = pb.grpc.ViewServiceStub(plain)
        assert code_and_message(lambda: stub.ListViews(pb.vs.ListViewsRequest(), timeout=5))[0] \
            == grpc.StatusCode.UNIMPLEMENTED
        reflection = plain.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
        assert code_and_message(lambda: list(reflection(iter([b"\x3a\x00"]), timeout=5)))[0] \
            == grpc.StatusCode.UNIMPLEMENTED


def test_mtls_requires_a_client_certificate_of_the_configured_ca(daemon_factory, pki, pb,
                                                                  tmp_path):
    d = start(daemon_factory, config_for(pki, tmp_path, client_ca=True))
    for kwargs in ({}, {"client": True, "client_pair": ("other_client_cert", "other_client_key")}):
        with tls_channel(pki, d, **kwargs) as channel:
            stub = pb.grpc.ViewServiceStub(channel)
            code, _ = code_and_message(lambda: stub.ListViews(pb.vs.ListViewsRequest(), timeout=5))
            assert code == grpc.StatusCode.UNAVAILABLE, kwargs
    with tls_channel(pki, d, client=True) as channel:
        stub = pb.grpc.ViewServiceStub(channel)
        # Without tokens_file a verified client certificate reads every view.
        assert sorted(v.name for v in stub.ListViews(pb.vs.ListViewsRequest(), timeout=10).views) \
            == sorted(ref.EXAMPLE_VIEWS)
        assert health(channel, "") == 1


def test_tokens_file_changes_apply_without_a_restart(daemon_factory, pki, pb, tmp_path):
    config = config_for(pki, tmp_path, tokens=[("admin", ADMIN, "all"),
                                               ("scraper", SCRAPER, [])])
    d = start(daemon_factory, config)
    d.metrics_ca = pki.ca_cert
    tokens_file = config["server"]["tokens_file"]
    added = "added-token-0123456789"
    with tls_channel(pki, d) as channel:
        stub = pb.grpc.ViewServiceStub(channel)

        def scan_code(token):
            return code_and_message(lambda: scan_gsi1(pb, stub, token))[0]

        assert scan_code(added) == grpc.StatusCode.UNAUTHENTICATED
        write_tokens(tokens_file, [("admin", ADMIN, "all"), ("scraper", SCRAPER, []),
                                   ("added", added, ["GSI1"])])
        wait_for("the added token to read", lambda: scan_code(added) == grpc.StatusCode.OK,
                 interval=0.1)
        write_tokens(tokens_file, [("added", added, ["GSI1"]), ("scraper", SCRAPER, [])])
        wait_for("the removed token to be refused",
                 lambda: scan_code(ADMIN) == grpc.StatusCode.UNAUTHENTICATED,
                 interval=0.1)
        # A file that does not load keeps the tokens in use (the file is looked at on a call).
        with open(tokens_file, "w", encoding="utf-8") as f:
            f.write("tokens:\n  - name: short\n    token: x\n    views: all\n")
        wait_for("the failed reload to be counted",
                 lambda: scan_code(added) == grpc.StatusCode.OK and metrics(d).get(
                     ("cdcview_auth_tokens_reloads_total", frozenset({("result", "failed")})))
                 == 1, timeout=2.5, interval=0.1)
        assert scan_code(added) == grpc.StatusCode.OK
    assert metrics(d)[("cdcview_auth_tokens_reloads_total", frozenset({("result", "ok")}))] == 2
    assert ("server.tokens_file changed but did not load; keeping the previous 2 tokens: "
            f"server.tokens_file {tokens_file}: tokens[0] (\"short\"): the token has 1 "
            "characters; at least 16 are required") in d.log()


def test_certificate_rotation_keeps_open_connections(daemon_factory, pki, pb, tmp_path):
    config = config_for(pki, tmp_path)
    d = start(daemon_factory, config)
    assert presented_serial(d.grpc_port) == SERVER_SERIAL
    expiry = ("cdcview_tls_certificate_expiry_timestamp_seconds", frozenset({("port", "grpc")}))
    assert metrics(d)[expiry] == not_after(pki.server_cert)
    opened = ("cdcview_connections_opened_total", frozenset({("port", "grpc")}))
    with tls_channel(pki, d) as old:
        old_stub = pb.grpc.ViewServiceStub(old)
        assert old_stub.ListViews(pb.vs.ListViewsRequest(), timeout=10).views
        mount_secret(tmp_path / "tls", pki.server2_cert, pki.server2_key)
        wait_for("new handshakes to present the second certificate",
                 lambda: presented_serial(d.grpc_port) == SERVER2_SERIAL, timeout=5, interval=0.2)
        before = metrics(d)[opened]
        # The connection opened before the rotation still answers, on the same connection.
        assert old_stub.ListViews(pb.vs.ListViewsRequest(), timeout=10).views
        assert metrics(d)[opened] == before
    with tls_channel(pki, d) as new:
        assert health(new, "") == 1
    wait_for("the reload counted", lambda: metrics(d).get(
        ("cdcview_tls_reloads_total", frozenset({("port", "grpc"), ("result", "ok")}))) == 1)
    assert metrics(d)[("cdcview_tls_reloads_total",
                       frozenset({("port", "grpc"), ("result", "failed")}))] == 0
    assert metrics(d)[expiry] == not_after(pki.server2_cert)
    # Relayed connections are counted while open and once each when they end.
    grpc_open = ("cdcview_connections_open", frozenset({("port", "grpc")}))
    wait_for("every relayed connection closed", lambda: metrics(d)[grpc_open] == 0)
    m = metrics(d)
    assert m[("cdcview_connections_closed_total",
              frozenset({("port", "grpc"), ("reason", "ended")}))] == m[opened]
    # Each relayed connection holds three descriptors of the budget.
    assert "(3 descriptors each: TLS relay)" in d.log()


def start_failure(daemon_factory, config, name):
    d = daemon_factory(config, name=name)
    with open(os.path.join(d.workdir, "start.log"), "wb") as out:
        code = subprocess.run([DAEMON_BIN, "--config", d.config_path], stdout=out,
                              stderr=subprocess.STDOUT, timeout=60).returncode
    with open(os.path.join(d.workdir, "start.log"), encoding="utf-8") as f:
        return code, f.read()


def test_bad_tls_files_stop_the_start_naming_them(daemon_factory, pki, tmp_path):
    config = config_for(pki, tmp_path)
    mount_secret(tmp_path / "tls", pki.server_cert, pki.client_key)
    code, log = start_failure(daemon_factory, config, "wrong-key")
    assert code == 1
    assert (f"cdcviewd: starting the gRPC server: server.tls_key_file "
            f"{config['server']['tls_key_file']}: not the key of the certificate in "
            f"{config['server']['tls_cert_file']}") in log
    mount_secret(tmp_path / "tls", pki.server_cert, pki.server_key)
    config["server"]["tls_client_ca_file"] = pki.server_key
    code, log = start_failure(daemon_factory, config, "ca-not-a-certificate")
    assert code == 1
    assert (f"cdcviewd: starting the gRPC server: server.tls_client_ca_file {pki.server_key}: "
            "not a PEM certificate (") in log


def closed_within(sock, seconds):
    """True if the server closes `sock` (end of stream or reset) within `seconds`; what it sends
    before (gRPC's HTTP/2 SETTINGS) is skipped."""
    deadline = time.monotonic() + seconds
    try:
        while True:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_silent_connections_are_closed_on_both_ports(daemon_factory, pki, tmp_path):
    config = config_for(pki, tmp_path)
    config["server"]["grpc_max_connection_idle_seconds"] = 1
    d = start(daemon_factory, config)
    health_port_number = int(d.health_addr.rsplit(":", 1)[1])
    # Neither sends a byte: no HTTP/2 preface on the health port, no ClientHello on the TLS port.
    with socket.create_connection(("127.0.0.1", health_port_number), timeout=5) as health_sock, \
            socket.create_connection(("127.0.0.1", d.grpc_port), timeout=5) as tls_sock:
        # The health port has the main port's idle time (1 s here), not gRPC's default of never.
        assert closed_within(health_sock, 8)
        # The TLS port: the handshake timeout (10 s), not gRPC's default of 120 s.
        assert closed_within(tls_sock, 20)
    with grpc.insecure_channel(d.health_addr) as channel:
        assert health(channel, "") == 1
