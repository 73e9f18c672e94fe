"""Shared machinery for cdcview's integration tests: binaries, gRPC stubs, a daemon driver.

The tests drive the real cdcviewd (and the real cdcview CLI) built by scripts/build.sh into
$CDCVIEW_BUILD_DIR (default <repo>/build). Every wait is bounded and says what it waited for;
every daemon started is stopped again, whatever the test did.
"""

import base64
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest

from tls_certs import make_pki

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_DIR = os.environ.get("CDCVIEW_BUILD_DIR", os.path.join(REPO, "build"))
DAEMON_BIN = os.path.join(BUILD_DIR, "daemon", "cdcviewd")
CLI_BIN = os.path.join(BUILD_DIR, "daemon", "cli", "cdcview")
SAMPLE = os.path.join(REPO, "examples", "app-stream.ndjson")
EXAMPLE_CONFIG = os.path.join(REPO, "examples", "cdcview.yaml")

SERVING_LINE = re.compile(
    r"cdcviewd serving gRPC on port (\d+), metrics on port (\d+), store in (.*)$", re.M)
FAST_READS_LINE = re.compile(
    r"cdcviewd serving the fast read port \(ViewService's unary reads\) on port (\d+)$", re.M)
WAIT_LIMIT = 60.0  # seconds; no wait in this suite is longer


def wait_for(what, predicate, timeout=WAIT_LIMIT, interval=0.02, describe=None):
    """Polls `predicate` until it returns a truthy value; fails naming `what` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"; last state: {describe()}" if describe else ""
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(interval)


# ---------------------------------------------------------------- binaries and stubs

@pytest.fixture(scope="session")
def binaries():
    missing = [p for p in (DAEMON_BIN, CLI_BIN) if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(f"missing {', '.join(missing)} (CDCVIEW_BUILD_DIR={BUILD_DIR}); "
                    f"build first: scripts/build.sh", pytrace=False)
    return DAEMON_BIN, CLI_BIN


class Stubs:
    """The generated cdcview.v1 modules."""

    def __init__(self, out_dir):
        sys.path.insert(0, out_dir)
        self.av = importlib.import_module("cdcview.v1.attribute_value_pb2")
        self.vs = importlib.import_module("cdcview.v1.view_service_pb2")
        self.grpc = importlib.import_module("cdcview.v1.view_service_pb2_grpc")


@pytest.fixture(scope="session")
def pb(tmp_path_factory):
    from grpc_tools import protoc
    out = str(tmp_path_factory.mktemp("stubs"))
    proto_root = os.path.join(REPO, "proto")
    files = sorted(os.path.join("cdcview", "v1", f)
                   for f in os.listdir(os.path.join(proto_root, "cdcview", "v1"))
                   if f.endswith(".proto"))
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    rc = protoc.main(["protoc", f"-I{proto_root}", f"-I{include}", f"--python_out={out}",
                      f"--grpc_python_out={out}"] + files)
    if rc != 0:
        pytest.fail(f"grpc_tools.protoc failed ({rc}) generating stubs from {proto_root}")
    return Stubs(out)


@pytest.fixture
def pki(tmp_path):
    """A fresh CA with server, second server (rotation) and client pairs: tls_certs.Pki."""
    return make_pki(tmp_path / "pki")


# ---------------------------------------------------------------- value conversion

def to_typed(value):
    """cdcview.v1.AttributeValue -> typed JSON ({"S": ...}, numbers as their text)."""
    kind = value.WhichOneof("value")
    if kind == "s":
        return {"S": value.s}
    if kind == "n":
        return {"N": value.n}
    if kind == "b":
        return {"B": base64.b64encode(value.b).decode()}
    if kind == "bool":
        return {"BOOL": value.bool}
    if kind == "null":
        return {"NULL": True}
    if kind == "m":
        return {"M": {k: to_typed(v) for k, v in value.m.fields.items()}}
    if kind == "l":
        return {"L": [to_typed(v) for v in value.l.values]}
    if kind == "ss":
        return {"SS": list(value.ss.values)}
    if kind == "ns":
        return {"NS": list(value.ns.values)}
    raise AssertionError(f"AttributeValue without a value: {value}")


def item_to_typed(item):
    return {k: to_typed(v) for k, v in item.attributes.items()}


def entry_to_tuple(entry):
    """A ViewEntry as (pk, sk, item) in typed JSON."""
    sk = to_typed(entry.sort_key) if entry.HasField("sort_key") else None
    return (to_typed(entry.partition_key), sk, item_to_typed(entry.item))


def ref_tuple(entry):
    return (entry.pk, entry.sk, entry.item)


# ---------------------------------------------------------------- the daemon

def expected_position(path, generation=0):
    """The file source's position after the last record of `path`:
    "<offset>:<next line>:<generation>:<inode>"."""
    with open(path, "rb") as f:
        data = f.read()
        inode = os.fstat(f.fileno()).st_ino
    position, offset = "0:1", 0
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
        complete = True
    else:
        complete = False
    for number, line in enumerate(lines, start=1):
        last = number == len(lines)
        offset += len(line) + (0 if last and not complete else 1)
        if line.strip(b" \t\r"):
            position = f"{offset}:{number + 1}:{generation}:{inode}"
    return position


class Daemon:
    """One cdcviewd process on a store in `workdir`; restartable on the same store."""

    def __init__(self, workdir, config=None, config_path=None, args=(), cwd=None, stubs=None,
                 prefix=()):
        self.workdir = str(workdir)
        self.prefix = list(prefix)  # a command that execs cdcviewd (e.g. taskset -c 1)
        self.store = os.path.join(self.workdir, "store")
        self.stubs = stubs
        self.args = list(args)
        self.cwd = cwd or self.workdir
        self.proc = None
        self.runs = 0
        self.channel = None
        if config_path is None:
            config_path = os.path.join(self.workdir, "cdcview.yaml")
            self.write_config(config)
        self.config_path = config_path

    # -- config

    def write_config(self, config):
        """Writes `config` (a dict; JSON is YAML) with storage and ports inside the test."""
        config = dict(config)
        config.setdefault("storage", {"path": self.store, "map_size": "64MiB"})
        config.setdefault("server", {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0"})
        with open(os.path.join(self.workdir, "cdcview.yaml"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=1)

    # -- life cycle

    @property
    def log_path(self):
        return os.path.join(self.workdir, f"cdcviewd.{self.runs}.log")

    def log(self):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def start(self, wait_serving=True):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.runs += 1
        self._close_channel()
        with open(self.log_path, "wb") as log:
            config = ["--config", self.config_path] if self.config_path else []
            self.proc = subprocess.Popen(self.prefix + [DAEMON_BIN] + config + self.args,
                                         cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        _RUNNING.add(self)
        match = wait_for(f"cdcviewd to log its ports in {self.log_path}", self._serving_line,
                         describe=lambda: self.log()[-2000:])
        self.grpc_port, self.metrics_port = int(match.group(1)), int(match.group(2))
        self.addr = f"127.0.0.1:{self.grpc_port}"
        fast = FAST_READS_LINE.search(self.log())  # logged before the line above, if it is on
        self.fast_addr = f"127.0.0.1:{fast.group(1)}" if fast else None
        self.channel = grpc.insecure_channel(self.addr)
        if self.stubs is not None:
            self.stub = self.stubs.grpc.ViewServiceStub(self.channel)
        if wait_serving:
            wait_for(f"gRPC health SERVING on {self.addr}", self.health_serving,
                     describe=lambda: self.log()[-2000:])
        return self

    def _serving_line(self):
        if self.proc.poll() is not None:
            pytest.fail(f"cdcviewd exited with {self.proc.returncode} before serving; "
                        f"log:\n{self.log()}")
        return SERVING_LINE.search(self.log())

    def health_serving(self):
        check = self.channel.unary_unary("/grpc.health.v1.Health/Check")
        try:
            return check(b"", timeout=2) == b"\x08\x01"
        except grpc.RpcError:
            return False

    def stop(self, expect_code=0):
        """SIGTERM and wait; asserts the exit code."""
        self._close_channel()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"cdcviewd did not exit within 30s of SIGTERM; log:\n{self.log()[-3000:]}")
        _RUNNING.discard(self)
        assert code == expect_code, f"cdcviewd exited with {code}; log:\n{self.log()[-3000:]}"

    def kill(self):
        self._close_channel()
        self.proc.kill()
        self.proc.wait(timeout=30)
        _RUNNING.discard(self)

    def _close_channel(self):
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    def ensure_dead(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._close_channel()
        _RUNNING.discard(self)

    def discard(self):
        """ensure_dead, then removes the work directory: what a module's fixture calls when it
        ends. A store's data.mdb holds its whole map on disk (storage.map_size, reserved with
        fallocate), so directories kept until the session ends would add up (pytest.ini removes
        a passed test's tmp_path the same way)."""
        self.ensure_dead()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- observing

    def status(self):
        return self.stub.GetStatus(self.stubs.vs.GetStatusRequest(), timeout=10)

    def source(self, name):
        for s in self.status().sources:
            if s.name == name:
                return s
        raise AssertionError(f"no source {name} in GetStatus")

    def positions(self, source):
        return {p.partition: p.position for p in self.source(source).positions}

    def wait_finished(self, source, path):
        """Until the file source read `path` to its end and its last record is applied."""
        want = expected_position(path)

        def done():
            s = self.source(source)
            if s.state == "error":
                pytest.fail(f"source {source} failed: {s.error}")
            got = {p.partition: p.position for p in s.positions}
            return s.state == "finished" and got.get("") == want

        def describe():
            s = self.source(source)
            return (f"state {s.state}, positions {[(p.partition, p.position) for p in s.positions]}, "
                    f"applied {s.events_applied}")

        wait_for(f"source {source} to finish {path} (position {want})", done, describe=describe)

    def wait_applied(self, source, count):
        """Until this process has applied `count` events from `source`."""
        wait_for(f"source {source} to apply {count} events",
                 lambda: self.source(source).events_applied >= count,
                 describe=lambda: f"applied {self.source(source).events_applied}")

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=10) as r:
            return parse_metrics(r.read().decode())

    def scan(self, view, limit=0):
        """Every entry of `view`, walking all pages; also returns the page sizes."""
        entries, sizes, token = [], [], b""
        for _ in range(100000):
            r = self.stub.Scan(self.stubs.vs.ScanRequest(view=view, limit=limit,
                                                         page_token=token), timeout=30)
            entries.extend(r.entries)
            sizes.append(len(r.entries))
            token = r.next_page_token
            if not token:
                return entries, sizes
        raise AssertionError(f"Scan of {view} never ended")

    def scan_all(self, views):
        return {v: [entry_to_tuple(e) for e in self.scan(v)[0]] for v in views}


_RUNNING = set()


@pytest.fixture
def daemon_factory(tmp_path, pb, binaries):
    """Makes Daemons in this test's tmp dir; kills whatever is left running afterwards."""
    made = []

    def make(config=None, name="d", **kwargs):
        workdir = tmp_path / name
        workdir.mkdir()
        d = Daemon(workdir, config=config, stubs=pb, **kwargs)
        made.append(d)
        return d

    yield make
    for d in made:
        d.ensure_dead()


def pytest_sessionfinish(session, exitstatus):
    for d in list(_RUNNING):  # a last line of defence: never leave a daemon behind
        d.ensure_dead()


# ---------------------------------------------------------------- metrics text

METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """Prometheus text -> {(name, frozenset(labels.items())): float}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC_LINE.match(line)
        assert m, f"unparsable metrics line: {line!r}"
        labels = frozenset(LABEL.findall(m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def dashboard_metric_names(prefix):
    """Every metric name starting with `prefix` that dashboards/cdcview.json or
    dashboards/alerts.yaml uses (histogram series as their _bucket/_sum/_count names)."""
    text = ""
    for name in ("cdcview.json", "alerts.yaml"):
        with open(os.path.join(REPO, "dashboards", name), encoding="utf-8") as f:
            text += f.read()
    return sorted({n for n in re.findall(r"\b(cdcview_[a-zA-Z0-9_]+)\b", text)
                   if n.startswith(prefix)})


def health(channel, service):
    """The grpc.health.v1 status of `service` (SERVING=1, NOT_SERVING=2) or the error code."""
    request = b"\x0a" + bytes([len(service)]) + service.encode() if service else b""
    check = channel.unary_unary("/grpc.health.v1.Health/Check")
    try:
        response = check(request, timeout=5)
    except grpc.RpcError as e:
        return e.code()
    return response[1] if response else 0  # field 1 (varint): 08 <status>


def metric(metrics, name, **labels):
    key = (name, frozenset(labels.items()))
    assert key in metrics, (f"no metric {name}{labels}; have "
                            f"{sorted(k for k in metrics if k[0] == name)}")
    return metrics[key]


def run_cli(*args, addr):
    """Runs the cdcview CLI; returns (exit code, stdout, stderr)."""
    p = subprocess.run([CLI_BIN, "--addr", addr] + list(args), capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout, p.stderr
