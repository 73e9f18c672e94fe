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
import urllib.error
import urllib.request

import pytest
import yaml

from conftest import SAMPLE, metric, parse_metrics, wait_for
from test_deploy import Prometheus
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
    and the tokens above; started and done with the sample."""
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


def test_tls_metrics_false_keeps_metrics_in_plaintext_behind_the_tokens(
        daemon_factory, pki, tmp_path):
    d = secure_daemon(daemon_factory, pki, tmp_path, tls_metrics=False)
    url = f"http://127.0.0.1:{d.metrics_port}/metrics"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url, timeout=10)
    assert (e.value.code, e.value.headers["WWW-Authenticate"]) == (401, 'Bearer realm="cdcview"')
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {SCRAPER_TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        assert metric(parse_metrics(r.read().decode()), "cdcview_auth_refused_total",
                      port="metrics", reason="no_token") == 1
