"""A driver of the Kafka Streams peer (tests/bench/peers/kafka-streams, scripts/kafka-streams-peer.sh):
build it, run it on a topic, read its HTTP answers. Used by test_kafka_streams_peer.py and
tests/bench/kafka_streams_compare.py.
"""

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import maven_build
from conftest import REPO

SCRIPT = os.path.join(REPO, "scripts", "kafka-streams-peer.sh")
SERVING = re.compile(r"\[peer\] serving HTTP on 127\.0\.0\.1:(\d+)")
PROJECT = os.path.join("tests", "bench", "peers", "kafka-streams")
BuildUnavailable = maven_build.BuildUnavailable


def build(timeout=1200):
    """Builds the peer (a no-op when up to date): maven_build.build."""
    maven_build.build(PROJECT, "kafka-streams-peer", timeout)


class Peer:
    """One run of the peer (a JVM) on `topics`, its state in `state_dir`, its log in `log_path`."""

    def __init__(self, bootstrap, topics, state_dir, log_path, application_id, prefix=(),
                 env=None):
        self.log_path = log_path
        os.makedirs(state_dir, exist_ok=True)
        self.state_dir = state_dir
        self.application_id = application_id
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                list(prefix) + [SCRIPT, "run", "--bootstrap", bootstrap, "--topics",
                                ",".join(topics), "--state-dir", state_dir, "--port", "0",
                                "--application-id", application_id],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=dict(os.environ, **(env or {})))
        self.port = None

    @property
    def pid(self):
        return self.proc.pid  # the script execs java: the JVM's pid

    def log(self):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def wait_serving(self, timeout=120):
        deadline = time.monotonic() + timeout
        while True:
            found = SERVING.search(self.log())
            if found:
                self.port = int(found.group(1))
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"the peer exited with {self.proc.returncode} before serving; "
                                   f"log:\n{self.log()[-4000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the peer did not open its HTTP port within {timeout}s; "
                                   f"log:\n{self.log()[-4000:]}")
            time.sleep(0.1)

    def get(self, path, timeout=60, **query):
        url = f"http://127.0.0.1:{self.port}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"GET {path} {query}: HTTP {e.code}: {e.read()[:2000]!r}") from e

    def progress(self):
        return self.get("/progress")

    def wait_caught_up(self, timeout=300, input_records=None, on_first=None):
        """Until /progress says caught_up twice in a row (and, if given, `input_records` were
        processed); returns (time the first input record was seen processed, time caught up),
        both time.monotonic(). `on_first()` is called when the first record is seen processed."""
        deadline, first, streak = time.monotonic() + timeout, None, 0
        last = None
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the peer exited with {self.proc.returncode}; "
                                   f"log:\n{self.log()[-4000:]}")
            try:
                last = self.progress()
            except (RuntimeError, OSError) as e:  # starting up: no group offsets yet
                last = {"error": str(e)}
            now = time.monotonic()
            if last.get("processed", 0) > 0 and first is None:
                first = now
                if on_first is not None:
                    on_first()
            done = last.get("caught_up") and (input_records is None or
                                              last.get("processed", 0) >= input_records)
            streak = streak + 1 if done else 0
            if streak >= 2:
                return first, now
            if now > deadline:
                summary = {k: v for k, v in last.items() if k != "offsets"}
                raise RuntimeError(f"the peer did not catch up within {timeout}s: {summary}")
            time.sleep(0.05)

    def dump(self, view):
        return self.get("/dump", view=view)["entries"]

    def aggregate(self, name):
        return self.get("/aggregates", name=name)["groups"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def ensure_dead(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
