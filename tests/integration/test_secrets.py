"""No AWS secret in any output: the daemon runs with distinctive credentials (environment keys
with a session token; a web identity token; a container authorization token) against moto and
against an endpoint that answers every request with an error quoting the request whole (its
headers, signed with the session token, and its body, which carries the web identity token),
as a faulty proxy might. The secrets must be absent from its log (stdout and stderr),
`--print-config`, its health errors and its dead-letter files.

The Kafka password's absence is checked by test_kafka_security.py, against its broker.
"""

import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import DAEMON_BIN, wait_for
from dynamodb_env import MotoServer, create_table, source_config

SECRET_KEY = "SecretKey-3f9a1c7e5b2d4068"
SESSION_TOKEN = "SessionToken-8e2b6d0f4a1c9573"
WEB_IDENTITY_TOKEN = "eyJWebIdentity-5c7a9e1b3d2f4860"
CONTAINER_TOKEN = "ContainerToken-1d3f5b7a9c0e2468"
SECRETS = (SECRET_KEY, SESSION_TOKEN, WEB_IDENTITY_TOKEN, CONTAINER_TOKEN)


class Echo(BaseHTTPRequestHandler):
    """Answers every request with an error that quotes it: DynamoDB's JSON error for a request
    with X-Amz-Target, STS's XML error for another POST, HTTP 403 with text for a GET."""

    def log_message(self, *args):
        pass

    def _request_text(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0)).decode()
        return "".join(f"{k}: {v}; " for k, v in self.headers.items()) + body

    def _answer(self, status, body, content_type):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        text = self._request_text()
        if "X-Amz-Target" in self.headers:
            self._answer(400, json.dumps({"__type": "com.amazon.coral.service#"
                                          "UnrecognizedClientException", "message": text}),
                         "application/x-amz-json-1.0")
        else:
            self._answer(400, f"<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>"
                              f"{text}</Message></Error></ErrorResponse>", "text/xml")

    def do_GET(self):
        self._answer(403, self._request_text(), "text/plain")


@pytest.fixture(scope="module")
def echo():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def moto():
    server = MotoServer()
    yield server
    server.stop()


def table(name, pk_type="S"):
    return {"name": name, "key": {"partition": {"attribute": "PK", "type": pk_type},
                                  "sort": "SK"},
            "views": [{"name": f"{name}_by_pk", "partition_key": {"attribute": "PK"},
                       "projection": "ALL"}]}


def everything_printed(d):
    """The daemon's log (its stdout and stderr), --print-config, and its dead-letter files."""
    run = subprocess.run([DAEMON_BIN, "--config", d.config_path, "--print-config"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    texts = {"log": d.log(), "--print-config": run.stdout + run.stderr}
    letters = os.path.join(d.store, "dead-letters")
    for name in os.listdir(letters) if os.path.isdir(letters) else []:
        with open(os.path.join(letters, name), encoding="utf-8", errors="replace") as f:
            texts[f"dead-letters/{name}"] = f.read()
    return texts


def assert_no_secret(d, *errors):
    texts = everything_printed(d)
    texts.update({f"health error {n}": e for n, e in enumerate(errors)})
    for where, text in texts.items():
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} in {where}:\n{text[-3000:]}"
    return texts


def wait_error(d, source):
    return wait_for(f"source {source} to report an error", lambda: d.source(source).error,
                    describe=lambda: str(d.source(source)))


def test_keys_and_session_token_appear_nowhere(daemon_factory, moto, echo, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDSECRETSTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
    ddb = moto.client()
    create_table(ddb, "Secrets")
    create_table(ddb, "Mismatch")
    for n in (1, 2):
        ddb.put_item(TableName="Secrets", Item={"PK": {"S": f"u{n}"}, "SK": {"S": "x"}})
    ddb.put_item(TableName="Mismatch", Item={"PK": {"S": "not-a-number"}, "SK": {"S": "x"}})
    d = daemon_factory({
        "sources": [source_config(moto.url, "Secrets", name="good"),
                    source_config(moto.url, "Mismatch", name="mismatch"),
                    source_config(echo, "Secrets", name="echo")],
        "tables": [table("Secrets"), table("Mismatch", pk_type="N")]})
    d.start()
    wait_for("both items and the rejected one", lambda: d.source("good").events_applied == 2
             and d.source("mismatch").events_rejected == 1,
             describe=lambda: f"{d.source('good')} {d.source('mismatch')}")
    entries = d.scan_all(["Secrets_by_pk"])["Secrets_by_pk"]
    assert [(e[0], e[2]) for e in entries] == [
        ({"S": f"u{n}"}, {"PK": {"S": f"u{n}"}, "SK": {"S": "x"}}) for n in (1, 2)]

    error = wait_error(d, "echo")
    # The endpoint's answer is in the error, with the secrets taken out of it.
    assert "UnrecognizedClientException (HTTP 400): " in error, error
    assert "X-Amz-Security-Token: <redacted>" in error, error
    d.stop()
    texts = assert_no_secret(d, error)
    assert list(texts) == ["log", "--print-config", "dead-letters/mismatch.ndjson",
                           "health error 0"]
    letter, = texts["dead-letters/mismatch.ndjson"].splitlines()
    letter = json.loads(letter)
    assert letter["reason"].endswith(": table Mismatch: key attribute PK must be N, got S")
    assert json.loads(letter["record"])["dynamodb"]["Keys"] == {"PK": {"S": "not-a-number"},
                                                                 "SK": {"S": "x"}}


def test_web_identity_and_container_tokens_appear_nowhere(daemon_factory, echo, monkeypatch,
                                                          tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    token_file = tmp_path / "web-identity-token"
    token_file.write_text(WEB_IDENTITY_TOKEN + "\n")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token_file))
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/cdcview")
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", echo)
    config = {"sources": [source_config(echo, "Secrets", name="app")],
              "tables": [table("Secrets")]}
    web = daemon_factory(config, name="web")
    web.start()
    error = wait_error(web, "app")
    assert "STS AssumeRoleWithWebIdentity failed: " in error, error
    assert "WebIdentityToken=<redacted>" in error, error
    web.stop()
    assert_no_secret(web, error)

    monkeypatch.delenv("AWS_WEB_IDENTITY_TOKEN_FILE")
    monkeypatch.delenv("AWS_ROLE_ARN")
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"{echo}/credentials")
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", CONTAINER_TOKEN)
    container = daemon_factory(config, name="container")
    container.start()
    error = wait_error(container, "app")
    assert f"container credentials endpoint {echo}/credentials answered HTTP 403: " in error, error
    assert "Authorization: <redacted>" in error, error
    container.stop()
    assert_no_secret(container, error)
