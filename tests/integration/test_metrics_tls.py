"""/metrics over TLS and behind bearer tokens, on the real daemon.

With server.tls_cert_file set (and server.tls_metrics, the default) /metrics is HTTPS only, with
the certificate reloaded when its files change; with server.tokens_file a scrape needs a bearer
token with `metrics: true`: none or an unknown one gets 401, one without the right 403, each
counted in cdcview_auth_refused_total{port="metrics"}. A real Prometheus scrapes it with
`tls_config` and `authorization`, as the ServiceMonitor in deploy/ does.
"""

import os
import shutil
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request

import pytest
import yaml

from conftest import SAMPLE, metric, parse_metrics, wait_for
from test_deploy import Prometheus
from test_tls import start_failure
from tls_certs import SERVER2_SERIAL, SERVER_SERIAL, serial_of

import reference as ref

SCRAPER_TOKEN = "scraper-token-0123456789"
APP_TOKEN = "app-token-0123456789abc"
SAMPLE_EVENTS = 3134  # events applied from examples/app-stream.ndjson


def write_tokens(path):
    path.write_text(yaml.safe_dump({"tokens": [
        {"name": "prometheus", "token": SCRAPER_TOKEN, "views": [], "metrics": True},
        {"name": "orders-api", "token": APP_TOKEN, "views": "all"},
    ]}))


def secure_daemon(daemon_factory, pki, tmp_path, **server):
    """A daemon ingesting the sample with TLS (server.crt, copied so that a test can replace it)
    and the tokens above (tokens_file=None: none); started and done with the sample."""
    tls = tmp_path / "tls"
    tls.mkdir()
    shutil.copy(pki.server_cert, tls / "tls.crt")
    shutil.copy(pki.server_key, tls / "tls.key")
    tokens = tmp_path / "tokens.yaml"
    write_tokens(tokens)
    config = {"sources": [{"name": "sample", "table": "App", "file": {"path": SAMPLE}}],
              "tables": [ref.EXAMPLE_TABLE],
              "server": {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0",
                         "tls_cert_file": str(tls / "tls.crt"),
                         "tls_key_file": str(tls / "tls.key"),
                         "tokens_file": str(tokens), **server}}
    config["server"] = {k: v for k, v in config["server"].items() if v is not None}
    # The main port's health is behind TLS and tokens too: wait on /metrics instead.
    d = daemon_factory(config).start(wait_serving=False)
    d.tls_dir = tls
    return d


def https_context(pki, client=False):
    ctx = ssl.create_default_context(cafile=pki.ca_cert)
    if client:
        ctx.load_cert_chain(pki.client_cert, pki.client_key)
    return ctx


def scrape(d, pki, token=None, client=False):
    """(status, headers, body) of GET https://127.0.0.1:<metrics>/metrics."""
    request = urllib.request.Request(f"https://127.0.0.1:{d.metrics_port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=https_context(pki, client), timeout=10) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def metrics_of(d, pki, **kwargs):
    status, _, body = scrape(d, pki, token=SCRAPER_TOKEN, **kwargs)
    assert status == 200, body
    return parse_metrics(body)


def served_serial(d, pki):
    """The serial number of the certificate a new TLS connection to /metrics gets."""
    with socket.create_connection(("127.0.0.1", d.metrics_port), timeout=10) as raw:
        with https_context(pki).wrap_socket(raw, server_hostname="localhost") as tls:
            der = tls.getpeercert(binary_form=True)
    return serial_of(ssl.DER_cert_to_PEM_cert(der).encode())


def sample_applied(d, pki):
    m = metrics_of(d, pki)
    return m.get(("cdcview_events_total",
                  frozenset({("source", "sample"), ("result", "applied")}))) == SAMPLE_EVENTS


def tls_prometheus(workdir, scrape_port, ca_file, token_file):
    """Prometheus scraping /metrics with a CA file and a bearer token file, as the
    ServiceMonitor in deploy/ sets it up."""
    workdir.mkdir()
    return Prometheus(workdir, scrape_port, scheme="https",
                      tls_config={"ca_file": str(ca_file), "server_name": "localhost"},
                      authorization={"type": "Bearer", "credentials_file": str(token_file)})


def target_of(prom):
    """The one target's state, or None before Prometheus lists it."""
    targets = prom.get("/api/v1/targets")["data"]["activeTargets"]
    assert len(targets) <= 1, targets
    return targets[0] if targets else None


def test_prometheus_scrapes_over_tls_with_a_bearer_token(daemon_factory, pki, tmp_path):
    d = secure_daemon(daemon_factory, pki, tmp_path)
    wait_for("the sample to be applied", lambda: sample_applied(d, pki), describe=d.log)
    token_file = tmp_path / "scrape-token"
    token_file.write_text(SCRAPER_TOKEN + "\n")
    prom = tls_prometheus(tmp_path / "prom", d.metrics_port, pki.ca_cert, token_file)
    try:
        wait_for("prometheus to be ready", prom.ready, describe=prom.log)
        target = {("instance", f"127.0.0.1:{d.metrics_port}"), ("job", "cdcview")}

        def scraped():
            got = prom.query('cdcview_events_total{result="applied"}')
            return got or None

        got = wait_for("prometheus to scrape cdcview_events_total over TLS", scraped,
                       describe=lambda: f"{target_of(prom)}\n{prom.log()}")
        assert got == {frozenset(target | {("source", "sample"), ("result", "applied")}):
                       float(SAMPLE_EVENTS)}
        t = target_of(prom)
        assert (t["health"], t["lastError"], t["scrapeUrl"]) == (
            "up", "", f"https://127.0.0.1:{d.metrics_port}/metrics")
        assert prom.query('up{job="cdcview"}') == {frozenset(target): 1.0}
    finally:
        prom.stop()
    # Prometheus was never refused.
    m = metrics_of(d, pki)
    for reason in ("no_token", "bad_token", "view_denied"):
        assert metric(m, "cdcview_auth_refused_total", port="metrics", reason=reason) == 0


def test_prometheus_with_a_token_that_may_not_scrape_sees_the_target_down(
        daemon_factory, pki, tmp_path):
    d = secure_daemon(daemon_factory, pki, tmp_path)
    token_file = tmp_path / "app-token"
    token_file.write_text(APP_TOKEN)
    prom = tls_prometheus(tmp_path / "prom", d.metrics_port, pki.ca_cert, token_file)
    try:
        wait_for("prometheus to be ready", prom.ready, describe=prom.log)
        t = wait_for("prometheus to try a scrape",
                     lambda: (lambda t: t if t and t["lastError"] else None)(target_of(prom)),
                     describe=prom.log)
        assert (t["health"], t["lastError"]) == ("down", "server returned HTTP status 403 Forbidden")
    finally:
        prom.stop()


def test_scrapes_without_the_right_token_are_refused_and_counted(daemon_factory, pki, tmp_path):
    d = secure_daemon(daemon_factory, pki, tmp_path)
    status, headers, body = scrape(d, pki)
    assert (status, headers["WWW-Authenticate"], body) == (
        401, 'Bearer realm="cdcview"',
        'no bearer token: send the header "authorization: Bearer <token>" '
        "(cdcview --token-file FILE)\n")
    status, headers, body = scrape(d, pki, token="not-a-token-of-the-file")
    assert (status, headers["WWW-Authenticate"], body) == (
        401, 'Bearer realm="cdcview", error="invalid_token"',
        "the bearer token is not one of server.tokens_file's tokens\n")
    status, headers, body = scrape(d, pki, token=APP_TOKEN)
    assert (status, headers["WWW-Authenticate"], body) == (
        403, 'Bearer realm="cdcview", error="insufficient_scope"',
        'token "orders-api" may not scrape /metrics: set metrics: true on it in '
        "server.tokens_file\n")
    m = metrics_of(d, pki)
    assert {reason: metric(m, "cdcview_auth_refused_total", port="metrics", reason=reason)
            for reason in ("no_token", "bad_token", "view_denied")} == {
        "no_token": 1, "bad_token": 1, "view_denied": 1}
    # Only /metrics is served.
    request = urllib.request.Request(f"https://127.0.0.1:{d.metrics_port}/other")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request, context=https_context(pki), timeout=10)
    assert e.value.code == 404


def test_plaintext_http_gets_no_metrics_from_the_tls_port(daemon_factory, pki, tmp_path):
    d = secure_daemon(daemon_factory, pki, tmp_path)
    with socket.create_connection(("127.0.0.1", d.metrics_port), timeout=10) as s:
        s.sendall(f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  f"Authorization: Bearer {SCRAPER_TOKEN}\r\n\r\n".encode())
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except ConnectionResetError:
            pass
    assert b"cdcview_" not in got and not got.startswith(b"HTTP/"), got[:200]
    assert metrics_of(d, pki)  # and the port still serves TLS


def test_a_rotated_certificate_is_served_to_the_next_scrape(daemon_factory, pki, tmp_path):
    d = secure_daemon(daemon_factory, pki, tmp_path)
    assert served_serial(d, pki) == SERVER_SERIAL
    assert metric(metrics_of(d, pki), "cdcview_tls_reloads_total", port="metrics", result="ok") == 0
    # As a Secret update does: new files swapped in whole.
    for src, name in ((pki.server2_cert, "tls.crt"), (pki.server2_key, "tls.key")):
        shutil.copy(src, d.tls_dir / f".{name}.new")
        os.replace(d.tls_dir / f".{name}.new", d.tls_dir / name)
    wait_for("the new certificate on a new connection",
             lambda: served_serial(d, pki) == SERVER2_SERIAL, timeout=10)
    m = metrics_of(d, pki)
    assert metric(m, "cdcview_tls_reloads_total", port="metrics", result="ok") == 1
    assert metric(m, "cdcview_tls_reloads_total", port="metrics", result="failed") == 0


def test_with_a_client_ca_a_scraper_needs_a_client_certificate(daemon_factory, pki, tmp_path):
    d = secure_daemon(daemon_factory, pki, tmp_path, tls_client_ca_file=pki.ca_cert)
    with pytest.raises((ssl.SSLError, ConnectionResetError, urllib.error.URLError)):
        scrape(d, pki, token=SCRAPER_TOKEN)
    assert metrics_of(d, pki, client=True)


def test_tls_metrics_false_with_tokens_is_refused_at_start(daemon_factory, pki, tmp_path):
    write_tokens(tmp_path / "tokens.yaml")
    config = {"sources": [{"name": "sample", "table": "App", "file": {"path": SAMPLE}}],
              "tables": [ref.EXAMPLE_TABLE],
              "server": {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0",
                         "tls_cert_file": pki.server_cert, "tls_key_file": pki.server_key,
                         "tls_metrics": False, "tokens_file": str(tmp_path / "tokens.yaml")}}
    code, log = start_failure(daemon_factory, config, "plaintext-tokens")
    assert code != 0
    assert ("server.tls_metrics: tls_metrics: false with tokens_file would send the scrape's "
            "bearer token in clear text: keep tls_metrics true, or leave tokens_file unset for a "
            "plaintext /metrics without tokens") in log, log


def test_tls_metrics_false_without_tokens_serves_plaintext_metrics_to_anyone(
        daemon_factory, pki, tmp_path):
    d = secure_daemon(daemon_factory, pki, tmp_path, tls_metrics=False, tokens_file=None)
    with urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}/metrics", timeout=10) as r:
        assert r.status == 200
        assert "cdcview_events_total" in r.read().decode()


def closed_within(conn, limit, trickle=None):
    """Seconds until the server closes `conn` (EOF or a reset), reading and dropping what it
    sends, calling `trickle` every second it stays silent; None when it is still open after
    `limit` seconds."""
    start = time.monotonic()
    conn.settimeout(1)
    while time.monotonic() - start < limit:
        try:
            if not conn.recv(65536):
                return time.monotonic() - start
        except (socket.timeout, ssl.SSLWantReadError):
            try:
                if trickle is not None:
                    trickle()
            except (OSError, ssl.SSLError):
                return time.monotonic() - start
        except (OSError, ssl.SSLError):
            return time.monotonic() - start
    return None


def test_slow_clients_are_cut_at_the_handshake_and_request_head_deadlines(
        daemon_factory, pki, tmp_path):
    """Neither a TLS handshake nor a request head can hold a connection slot past its deadline
    (10 s each) by sending a byte now and then."""
    d = secure_daemon(daemon_factory, pki, tmp_path)
    # No ClientHello at all.
    silent = socket.create_connection(("127.0.0.1", d.metrics_port), timeout=10)
    # A request head started and then trickled, a byte a second (each read well within 30 s).
    raw = socket.create_connection(("127.0.0.1", d.metrics_port), timeout=10)
    trickling = https_context(pki).wrap_socket(raw, server_hostname="localhost")
    trickling.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    results = {}

    def watch(name, conn, trickle=None):
        results[name] = closed_within(conn, 20, trickle)

    threads = [threading.Thread(target=watch, args=("handshake", silent)),
               threading.Thread(target=watch, args=("head", trickling,
                                                    lambda: trickling.sendall(b"X")))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    silent.close()
    trickling.close()
    assert results["handshake"] is not None and 9 <= results["handshake"] <= 13, results
    assert results["head"] is not None and 9 <= results["head"] <= 13, results
    assert metrics_of(d, pki)  # the port still serves


def test_with_tokens_any_refusal_closes_the_connection(daemon_factory, pki, tmp_path):
    """A client cannot keep a connection (one of 16) open with requests that need no token."""
    d = secure_daemon(daemon_factory, pki, tmp_path)
    for request in (b"GET /other HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                    b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"):
        raw = socket.create_connection(("127.0.0.1", d.metrics_port), timeout=10)
        with https_context(pki).wrap_socket(raw, server_hostname="localhost") as conn:
            conn.sendall(request)
            got = b""
            while chunk := conn.recv(65536):  # until the server closes
                got += chunk
        head = got.split(b"\r\n\r\n")[0].split(b"\r\n")
        assert head[0] in (b"HTTP/1.1 404 Not Found", b"HTTP/1.1 401 Unauthorized"), got
        assert b"Connection: close" in head, got
    # A scrape with the token keeps its connection for the next one.
    raw = socket.create_connection(("127.0.0.1", d.metrics_port), timeout=10)
    with https_context(pki).wrap_socket(raw, server_hostname="localhost") as conn:
        scrape_request = (f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          f"Authorization: Bearer {SCRAPER_TOKEN}\r\n\r\n").encode()
        for _ in range(2):
            conn.sendall(scrape_request)
            got = b""
            while b"\r\n\r\n" not in got:
                got += conn.recv(65536)
            head, _, body = got.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close" not in head
            length = int(next(line for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")).split(b":")[1])
            while len(body) < length:
                body += conn.recv(65536)
