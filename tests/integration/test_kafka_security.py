"""cdcviewd's Kafka source and its dead-letter producer over TLS, against a real broker:
SASL_SSL with SCRAM-SHA-512 (a password) and SSL with a client certificate (mTLS).

The test makes its own CA and certificates with `openssl`, starts a second broker
(scripts/kafka.sh with KAFKA_TLS_DIR and KAFKA_SCRAM_USERS_FILE) with both listeners besides its
PLAINTEXT one, which the test's own clients use to make topics, produce and read. The daemon
reads its secrets from a file and from the environment (${file:PATH}, ${env:NAME}); no secret
may appear in its log, its errors or `--print-config`.

The secure broker is Kafka 3.9 (CDCVIEW_KAFKA_TLS_VERSION): the librdkafka cdcviewd links on
Debian 12 (2.0.2) sends a SCRAM proof that Kafka 4.0 and later refuse whatever the password
(fixed in librdkafka 2.6.1); with a newer librdkafka, set it to the plaintext broker's version.
"""

import json
import os
import re
import subprocess

import pytest

from conftest import DAEMON_BIN, metric, wait_for
from kafka_fixture import SCRIPT, Kafka
from test_kafka import table_for, user, wait_caught_up

TLS_BROKER_VERSION = os.environ.get("CDCVIEW_KAFKA_TLS_VERSION", "3.9.1")
USER = "cdcview"
PASSWORD = "Sasl-Pw-7f3a9c2e51d4"       # the SCRAM user's password
KEY_PASSWORD = "Key-Pw-b8e04d1c97a6"    # the client key's passphrase (mTLS)
WRONG_PASSWORD = "Wrong-Pw-0c6d2a59e3"
SECRETS = (PASSWORD, KEY_PASSWORD, WRONG_PASSWORD)
KEY_PASSWORD_VARIABLE = "CDCVIEW_TEST_KAFKA_KEY_PASSWORD"
# Fast group protocol for tests (the broker's group.min.session.timeout.ms is 6 s).
GROUP_PROPS = {"heartbeat.interval.ms": "300", "session.timeout.ms": "6000"}


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def leaf(cwd, name, usage):
    """A P-256 key and a certificate for 127.0.0.1 signed by ca.key, for `usage`
    (serverAuth or clientAuth)."""
    with open(os.path.join(cwd, f"{name}.ext"), "w") as f:
        f.write(f"basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                f"extendedKeyUsage={usage}\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=cwd)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
            cwd=cwd)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """ca.crt; the broker's PKCS#12 keystore (broker.p12, broker.p12.password); the client's
    certificate (client.crt) and its key encrypted with KEY_PASSWORD (client.key.enc)."""
    d = str(tmp_path_factory.mktemp("pki"))
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=cdcview test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    leaf(d, "broker", "serverAuth")
    leaf(d, "client", "clientAuth")
    with open(os.path.join(d, "broker.p12.password"), "w") as f:
        f.write("broker-store-pw\n")
    openssl("pkcs12", "-export", "-in", "broker.crt", "-inkey", "broker.key", "-name", "broker",
            "-out", "broker.p12", "-passout", "pass:broker-store-pw", cwd=d)
    openssl("pkcs8", "-topk8", "-in", "client.key", "-out", "client.key.enc",
            "-passout", f"pass:{KEY_PASSWORD}", cwd=d)
    return d


class SecureKafka:
    def __init__(self, run_dir):
        def read(name):
            with open(os.path.join(run_dir, name)) as f:
                return f.read().strip()
        self.plain = Kafka(read("bootstrap"))  # the test's own clients
        self.sasl_ssl = read("bootstrap-sasl_ssl")
        self.ssl = read("bootstrap-ssl")
        self.run_dir = run_dir


@pytest.fixture(scope="module")
def secure_kafka(pki, tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("kafka-tls"))
    users = os.path.join(run_dir, "scram-users")
    with open(users, "w") as f:
        f.write(f"{USER} {PASSWORD}\n")
    env = dict(os.environ, KAFKA_TLS_DIR=pki, KAFKA_SCRAM_USERS_FILE=users,
               KAFKA_VERSION=TLS_BROKER_VERSION)
    started = subprocess.run([SCRIPT, "start", run_dir], capture_output=True, text=True,
                             timeout=900, env=env)
    if started.returncode != 0:
        pytest.fail(f"{SCRIPT} start failed ({started.returncode}):\n{started.stderr[-3000:]}",
                    pytrace=False)
    broker = SecureKafka(run_dir)
    try:
        yield broker
    finally:
        broker.plain.admin = None
        subprocess.run([SCRIPT, "stop", run_dir], capture_output=True, text=True, timeout=120)


def sasl_properties(pki, password_file):
    return dict(GROUP_PROPS, **{
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": USER, "sasl.password": "${file:" + password_file + "}",
        "ssl.ca.location": os.path.join(pki, "ca.crt")})


def mtls_properties(pki):
    return dict(GROUP_PROPS, **{
        "security.protocol": "SSL", "ssl.ca.location": os.path.join(pki, "ca.crt"),
        "ssl.certificate.location": os.path.join(pki, "client.crt"),
        "ssl.key.location": os.path.join(pki, "client.key.enc"),
        "ssl.key.password": "${env:" + KEY_PASSWORD_VARIABLE + "}"})


def source(name, brokers, topic, properties, **extra):
    kafka = {"brokers": brokers, "topics": [topic], "group": f"g-{topic}",
             "format": "dynamodb-json", "properties": properties}
    kafka.update(extra)
    return {"name": name, "table": table_for("dynamodb-json")["name"], "kafka": kafka}


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return str(path)


def print_config(d):
    run = subprocess.run([DAEMON_BIN, "--config", d.config_path, "--print-config"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    return run.stdout + run.stderr


def assert_no_secret(text, where):
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} in {where}"


def test_sasl_ssl_and_mtls_feed_the_views_and_the_dead_letter_topic(
        secure_kafka, pki, daemon_factory, monkeypatch, tmp_path):
    k = secure_kafka.plain
    sasl_topic, mtls_topic, dlq = k.topic("sasl", 1), k.topic("mtls", 1), k.topic("tls-dlq", 1)
    good = [json.dumps(user(n)).encode() for n in (1, 2, 3)]
    truncated = good[0][:40]
    k.produce(sasl_topic, [(0, b"s0", good[0]), (0, b"s1", truncated), (0, b"s2", good[1])])
    k.produce(mtls_topic, [(0, b"m0", good[2]), (0, b"m1", b"{not json")])

    password_file = write(tmp_path / "kafka-password", PASSWORD + "\n")
    monkeypatch.setenv(KEY_PASSWORD_VARIABLE, KEY_PASSWORD)
    sources = [source("sasl", secure_kafka.sasl_ssl, sasl_topic,
                      sasl_properties(pki, password_file), dead_letter_topic=dlq),
               source("mtls", secure_kafka.ssl, mtls_topic, mtls_properties(pki),
                      dead_letter_topic=dlq)]
    d = daemon_factory({"sources": sources, "tables": [table_for("dynamodb-json")]})

    printed = print_config(d)
    assert_no_secret(printed, "--print-config")
    assert f'sasl.password: "${{file:{password_file}}}"' in printed, printed
    assert f'ssl.key.password: "${{env:{KEY_PASSWORD_VARIABLE}}}"' in printed, printed

    d.start()
    wait_caught_up(d, "sasl", {f"{sasl_topic}/0": "3"}, timeout=60)
    wait_caught_up(d, "mtls", {f"{mtls_topic}/0": "2"}, timeout=60)
    gsi = d.scan_all(["GSI1_dynamodb"])["GSI1_dynamodb"]
    assert [e[2]["PK"]["S"] for e in gsi] == ["USER#poison1", "USER#poison2", "USER#poison3"]
    m = d.metrics()
    for name, applied in (("sasl", 2), ("mtls", 1)):
        assert metric(m, "cdcview_events_total", source=name, result="applied") == applied
        assert metric(m, "cdcview_events_total", source=name, result="rejected") == 1

    # Each source's dead-letter producer went through its own secure listener.
    letters = k.read_all(dlq)
    assert len(letters) == 2, letters
    headers = [dict((h, v.decode()) for h, v in (x.headers() or [])) for x in letters]
    got = {(h["cdcview.source.topic"], h["cdcview.source.offset"]):
           (h["cdcview.reason"], x.key(), x.value()) for h, x in zip(headers, letters)}
    assert set(got) == {(sasl_topic, "1"), (mtls_topic, "1")}
    reason, key, value = got[(sasl_topic, "1")]
    assert reason.startswith(f"{sasl_topic}/0@1: malformed JSON: "), reason
    assert (key, value) == (b"s1", truncated)
    reason, key, value = got[(mtls_topic, "1")]
    assert reason.startswith(f"{mtls_topic}/0@1: malformed JSON: "), reason
    assert (key, value) == (b"m1", b"{not json")
    d.stop()
    assert_no_secret(d.log(), "the daemon's log")


def tls_error(brokers, index, librdkafka_says):
    """Our words around librdkafka's (which connection, its OpenSSL error, how long it took)."""
    b = re.escape(brokers)
    return re.compile(
        rf"TLS with the Kafka brokers {b} failed: ssl://{b}/bootstrap: {librdkafka_says} "
        rf"\(after \d+ms in state \w+(, \d+ identical error\(s\) suppressed)?\); check "
        rf"ssl.ca.location \(the brokers' CA\) and, where the brokers require client "
        rf"certificates, ssl.certificate.location and ssl.key.location in "
        rf"sources\[{index}\].kafka.properties; retrying by itself")


def test_a_wrong_password_or_certificate_is_named_and_no_secret_printed(
        secure_kafka, pki, daemon_factory, monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_PASSWORD_VARIABLE, KEY_PASSWORD)
    topic = secure_kafka.plain.topic("wrong", 1)
    password_file = write(tmp_path / "kafka-password", WRONG_PASSWORD)
    ca = os.path.join(pki, "ca.crt")
    sources = [source("sasl", secure_kafka.sasl_ssl, topic, sasl_properties(pki, password_file)),
               # The mTLS listener without a client certificate; with a CA that did not sign
               # the broker's.
               source("nocert", secure_kafka.ssl, topic,
                      dict(GROUP_PROPS, **{"security.protocol": "SSL", "ssl.ca.location": ca})),
               source("wrongca", secure_kafka.ssl, topic,
                      dict(mtls_properties(pki),
                           **{"ssl.ca.location": os.path.join(pki, "client.crt")}))]
    d = daemon_factory({"sources": sources, "tables": [table_for("dynamodb-json")]})
    d.start()
    b = re.escape(secure_kafka.sasl_ssl)
    # librdkafka's own words between ours: which connection, and how long it took.
    want = re.compile(
        rf"the Kafka brokers {b} refused the credentials: sasl_ssl://{b}/bootstrap: SASL "
        rf"authentication error: Authentication failed during authentication due to invalid "
        rf"credentials with SASL mechanism SCRAM-SHA-512 \(after \d+ms in state AUTH_REQ"
        rf"(, \d+ identical error\(s\) suppressed)?\); check sasl.mechanism, sasl.username and "
        rf"sasl.password in sources\[0\].kafka.properties and the user on the brokers; retrying "
        rf"by itself( \(this librdkafka, 2.0.2, fails SCRAM with Kafka 4.0 and later brokers even "
        rf"with the right password; 2.6.1 and later do not\))?")
    wait_for("the source to report the refused password", lambda: d.source("sasl").error,
             timeout=60, describe=lambda: str(d.source("sasl")))
    s = d.source("sasl")
    assert s.state == "error"
    assert want.fullmatch(s.error), s.error
    assert re.search(rf"^\S+ error source sasl: {want.pattern}$", d.log(), re.MULTILINE), d.log()

    refused = tls_error(secure_kafka.ssl, 1, r"Receive failed: error:\w+:SSL routines::"
                                              r"[^;]*alert[^;]*")
    unverified = tls_error(secure_kafka.ssl, 2, r"SSL handshake failed: error:\w+:SSL routines::"
                                                r"certificate verify failed: [^;]*")
    for name, error in (("nocert", refused), ("wrongca", unverified)):
        wait_for(f"source {name} to report its TLS error",
                 lambda: error.fullmatch(d.source(name).error), timeout=60,
                 describe=lambda: str(d.source(name)))
    d.stop()
    assert_no_secret(d.log(), "the daemon's log")
