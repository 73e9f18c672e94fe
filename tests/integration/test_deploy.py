"""deploy/ and dashboards/ checked against the real binary.

* Alerts: `promtool check rules`, `promtool test rules` (every alert has a firing test case),
  a runbook section per alert.
* Dashboard and rules: every metric they name is in cdcviewd's /metrics after ingesting the
  sample (the Kafka- and DynamoDB-only ones: in their probes here, in real output in
  test_kafka.py and test_dynamodb.py), label matchers name labels the metric has, every
  panel's PromQL parses, the write-amplification panel joins per table (promtool);
  `promtool check metrics` accepts /metrics.
* A real Prometheus scrapes a running cdcviewd; its counts, lag sum, per-source lag and p99
  equal the daemon's.
* Kubernetes: `kubectl kustomize` (or the standalone `kustomize build`) renders every overlay;
  probes, ports, health service names, config (parsed by `cdcviewd --print-config` with the
  container's args and environment), flags and environment variables agree with the binary;
  terminationGracePeriodSeconds exceeds the measured drain time and the drain bound that
  `cdcviewd --help` states; a hanging DynamoDB request does not hold the drain. Hardening: the
  container's security context, TLS files and tokens from mounted Secrets, the NetworkPolicy,
  the ServiceMonitor's TLS and bearer token, the ServiceAccount, and docs/TLS.md's
  certificates and Secrets against what the overlays use.
* Dockerfile (static: docker cannot run here): the runtime stage installs a package for every
  shared library the binaries load; the build stage copies what CMake builds and installs the
  -dev packages.
* Config from flags and environment: precedence, --set and CDCVIEW_<PATH>, --print-config,
  CDCVIEW_LOG_JSON, JSON start-up errors, event-count lines and throttled rejection warnings.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import grpc
import pytest
import yaml

from conftest import (CLI_BIN, DAEMON_BIN, EXAMPLE_CONFIG, REPO, SAMPLE, Daemon, health,
                      metric, parse_metrics, wait_for)

DASHBOARDS = os.path.join(REPO, "dashboards")
DASHBOARD = os.path.join(DASHBOARDS, "cdcview.json")
ALERTS = os.path.join(DASHBOARDS, "alerts.yaml")
ALERTS_TEST = os.path.join(DASHBOARDS, "alerts_test.yaml")
RUNBOOK = os.path.join(DASHBOARDS, "README.md")
DEPLOY = os.path.join(REPO, "deploy")
DOCKERFILE = os.path.join(DEPLOY, "Dockerfile")
OVERLAYS = ["statefulset", "sidecar", "partitioned"]
IMAGE = "ghcr.io/example/cdcview"

# Metrics a panel or rule may name although the sample run (one file source) does not export
# them. Source-specific: only a Kafka or DynamoDB Streams source registers these. Planned: not
# exported by any cdcviewd yet; a panel shows them once they exist (none at the moment).
# Nothing else is skipped.
SOURCE_SPECIFIC_METRICS = {
    "cdcview_kafka_consumer_lag_messages",
    "cdcview_kafka_rebalances_total",
    "cdcview_dynamodb_shards",
    "cdcview_dynamodb_iterator_age_seconds",
    "cdcview_dynamodb_requests_total",
    "cdcview_dynamodb_trimmed_data_total",
}
PLANNED_METRICS = set()
# Only a member of a partitioned cluster (`cluster:`) exports these (partitions owned: any
# daemon with a Kafka source); the names are the ones the daemon's code registers
# (test_cluster_metrics_are_registered_by_the_cluster_code).
CLUSTER_METRICS = {
    "cdcview_cluster_members",
    "cdcview_cluster_partitions_owned",
    "cdcview_cluster_fanout_seconds_bucket",
    "cdcview_cluster_fanout_errors_total",
}
# Only a daemon with the DynamoDB endpoint on (`server.dynamodb`) exports these, once it has
# answered a request; test_dynamodb_limits.py checks them against such a daemon.
DYNAMODB_API_METRICS = {
    "cdcview_dynamodb_api_requests_total",
    "cdcview_dynamodb_api_request_duration_seconds_bucket",
    "cdcview_dynamodb_api_moved_total",
    "cdcview_dynamodb_api_build_wait_seconds_count",
}
SKIPPED_METRICS = SOURCE_SPECIFIC_METRICS | PLANNED_METRICS | CLUSTER_METRICS | DYNAMODB_API_METRICS

# Prometheus adds these to every scraped series; they are not in /metrics.
TARGET_LABELS = {"instance", "job"}

GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h",
                     "${datasource}": "", "$instance": ".*", "$view": ".*"}

METRIC_NAME = re.compile(r"\b(cdcview_[a-zA-Z0-9_]+)\b")
SELECTOR = re.compile(r"\b(cdcview_[a-zA-Z0-9_]+)\{([^}]*)\}")
MATCHER_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def tool(name):
    path = shutil.which(name)
    if path is None:
        # promtool and prometheus come with Debian's prometheus package (install-deps.sh).
        pytest.fail(f"{name} not found on PATH: run scripts/install-deps.sh", pytrace=False)
    return path


def run(args, input=None, env=None, timeout=120):
    return subprocess.run(args, input=input, capture_output=True, text=True, env=env,
                          timeout=timeout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def dashboard():
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


def panels(dash):
    """Every non-row panel, including panels nested in collapsed rows."""
    out = []
    for p in dash["panels"]:
        if p["type"] == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def panel_exprs(dash):
    """(panel title, refId, expr) for every query of every panel."""
    return [(p["title"], t["refId"], t["expr"]) for p in panels(dash) for t in p["targets"]]


def substitute(expr):
    for var, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(var, value)
    return expr


def rules():
    return [r for g in load_yaml(ALERTS)["groups"] for r in g["rules"]]


def alert_names():
    return [r["alert"] for r in rules() if "alert" in r]


def all_exprs():
    """(where, expr) of every panel query, template variable query and rule."""
    dash = dashboard()
    out = [(f"panel {title!r} {ref}", expr) for title, ref, expr in panel_exprs(dash)]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            out.append((f"variable {var['name']}", var["query"]["query"]))
    out += [(f"rule {r.get('alert') or r.get('record')}", r["expr"]) for r in rules()]
    return out


# ---------------------------------------------------------------- the daemon on the sample

@pytest.fixture(scope="module")
def sampled(tmp_path_factory, pb, binaries):
    """cdcviewd with the example views on the sample, plus a source with one malformed line
    (so the rejection metrics exist too), both read to the end."""
    workdir = tmp_path_factory.mktemp("deploy")
    bad = workdir / "bad.ndjson"
    bad.write_text("{not json\n")
    config = load_yaml(EXAMPLE_CONFIG)
    del config["storage"], config["server"]
    config["sources"] = [
        {"name": "sample", "table": "App", "file": {"path": SAMPLE}},
        {"name": "bad", "table": "App", "file": {"path": str(bad)}},
    ]
    d = Daemon(workdir, config=config, stubs=pb)
    d.bad_path = str(bad)
    try:
        d.start()
        d.wait_finished("sample", SAMPLE)
        d.wait_finished("bad", str(bad))
        yield d
    finally:
        d.discard()


def metrics_text(d):
    with urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}/metrics", timeout=10) as r:
        return r.read().decode()


def metric_labels(text):
    """Sample name -> set of label names, from the exposition text."""
    out = {}
    for (name, labels) in parse_metrics(text):
        out.setdefault(name, set()).update(k for k, _ in labels)
    return out


# ---------------------------------------------------------------- alerts and rules

def test_promtool_check_rules_accepts_the_rules():
    p = run([tool("promtool"), "check", "rules", ALERTS])
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"SUCCESS: {len(rules())} rules found" in p.stdout


def test_promtool_unit_tests_pass_and_cover_every_alert():
    p = run([tool("promtool"), "test", "rules", ALERTS_TEST], )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS" in p.stdout
    # Every alert has a case where it fires (a non-empty exp_alerts) and one where it does not.
    fired, quiet = set(), set()
    for test in load_yaml(ALERTS_TEST)["tests"]:
        for case in test.get("alert_rule_test", []):
            (fired if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert sorted(fired) == sorted(alert_names())
    assert sorted(quiet) == sorted(alert_names())


def test_the_required_alerts_exist_each_with_a_runbook_section():
    names = alert_names()
    assert names == ["CdcviewReplicationLagHigh", "CdcviewIngestionStalled",
                     "CdcviewDeadLettersIncreasing", "CdcviewLmdbMapNearCeiling",
                     "CdcviewDynamoDbTrimmedData", "CdcviewQueryErrorRatioHigh",
                     "CdcviewClusterMemberDown", "CdcviewClusterPeerUnreachable",
                     "CdcviewClusterPartitionsUnowned", "CdcviewClusterMemberLagging"]
    with open(RUNBOOK, encoding="utf-8") as f:
        headings = re.findall(r"^## (\S+)$", f.read(), re.M)
    assert sorted(headings) == sorted(names)
    for r in rules():
        if "alert" in r:
            assert r["annotations"]["runbook_url"].endswith(
                "dashboards/README.md#" + r["alert"].lower()), r["alert"]
            assert r["labels"]["severity"] in ("warning", "critical"), r["alert"]


# ---------------------------------------------------------------- metrics against the binary

def test_promtool_check_metrics_accepts_the_daemons_metrics(sampled):
    p = run([tool("promtool"), "check", "metrics"], input=metrics_text(sampled))
    assert p.returncode == 0, f"promtool check metrics:\n{p.stdout}{p.stderr}"


def test_every_metric_a_panel_or_rule_uses_is_exported(sampled):
    exported = metric_labels(metrics_text(sampled))
    used = {}
    for where, expr in all_exprs():
        for name in METRIC_NAME.findall(expr):
            used.setdefault(name, []).append(where)
    missing = {n: w for n, w in used.items() if n not in exported and n not in SKIPPED_METRICS}
    assert not missing, f"not in cdcviewd's /metrics after the sample: {missing}"
    # The skip list stays honest: each entry is used, and planned ones are really missing.
    assert sorted(SKIPPED_METRICS - set(used)) == []
    assert sorted(PLANNED_METRICS & set(exported)) == [], "exported now: drop from PLANNED_METRICS"
    # Guards against comparing nothing: the core metrics are used and present.
    for name in ("cdcview_events_total", "cdcview_replication_lag_seconds_bucket",
                 "cdcview_rejected_events_total", "cdcview_query_duration_seconds_count",
                 "cdcview_lmdb_map_max_bytes", "cdcview_index_writes_total"):
        assert name in used and name in exported, name


def test_source_specific_metrics_are_registered_by_their_probes():
    """The skipped metrics are not simply absent from the sample run: each is registered by
    its source's probe (the Kafka and DynamoDB tests check them in real /metrics output, see
    test_kafka.py and test_dynamodb.py)."""
    registered = {}
    for probe in ("kafka_probe.cc", "dynamodb_probe.cc"):
        with open(os.path.join(REPO, "daemon", "metrics", probe), encoding="utf-8") as f:
            for name in re.findall(r'\.Name\("(cdcview_[a-z_]+)"\)', f.read()):
                registered[name] = probe
    assert sorted(SOURCE_SPECIFIC_METRICS - set(registered)) == []
    used = {n for _, expr in all_exprs() for n in METRIC_NAME.findall(expr)}
    assert SOURCE_SPECIFIC_METRICS <= used


def test_cluster_metrics_are_registered_by_the_cluster_code():
    """The cluster metrics the dashboard and the alerts use are the ones daemon/ registers (a
    histogram's series are its name plus _bucket)."""
    registered = set()
    for root, _, files in os.walk(os.path.join(REPO, "daemon")):
        for name in files:
            if name.endswith(".cc"):
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    registered.update(re.findall(r'\.Name\("(cdcview_cluster_[a-z_]+)"\)',
                                                 f.read()))
    used = {n for _, expr in all_exprs() for n in METRIC_NAME.findall(expr)
            if n.startswith("cdcview_cluster_")}
    assert used == CLUSTER_METRICS
    assert sorted(n for n in CLUSTER_METRICS
                  if n not in registered and n.removesuffix("_bucket") not in registered) == []


def test_write_amplification_divides_by_the_views_own_table(tmp_path):
    """Two tables: App (source a, 100 events/min, views V1 and V2) and Other (source b,
    1000 events/min, view W). Each view's writes per event are over its table's events only."""
    [expr] = [e for title, _, e in panel_exprs(dashboard())
              if title == "Index writes per event (write amplification)"]
    t = 'instance="i:1", job="cdcview"'
    series = [
        (f'cdcview_events_total{{{t}, source="a", result="applied"}}', "0+100x20"),
        (f'cdcview_events_total{{{t}, source="b", result="applied"}}', "0+1000x20"),
        (f'cdcview_source_info{{{t}, source="a", table="App", kind="file"}}', "1x20"),
        (f'cdcview_source_info{{{t}, source="b", table="Other", kind="kafka"}}', "1x20"),
        (f'cdcview_view_info{{{t}, view="V1", table="App"}}', "1x20"),
        (f'cdcview_view_info{{{t}, view="V2", table="App"}}', "1x20"),
        (f'cdcview_view_info{{{t}, view="W", table="Other"}}', "1x20"),
        (f'cdcview_index_writes_total{{{t}, view="V1", op="put"}}', "0+200x20"),
        (f'cdcview_index_writes_total{{{t}, view="V1", op="delete"}}', "0+50x20"),
        (f'cdcview_index_writes_total{{{t}, view="V2", op="put"}}', "0+100x20"),
        (f'cdcview_index_writes_total{{{t}, view="W", op="put"}}', "0+1000x20"),
    ]
    test = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series],
        "promql_expr_test": [{
            "expr": substitute(expr), "eval_time": "15m",
            "exp_samples": [{"labels": '{instance="i:1", view="V1"}', "value": 2.5},
                            {"labels": '{instance="i:1", view="V2"}', "value": 1},
                            {"labels": '{instance="i:1", view="W"}', "value": 1}]}]}]}
    path = tmp_path / "write_amplification_test.yaml"
    path.write_text(yaml.safe_dump(test))
    p = run([tool("promtool"), "test", "rules", str(path)])
    assert p.returncode == 0, p.stdout + p.stderr


def test_label_matchers_name_labels_the_metric_has(sampled):
    exported = metric_labels(metrics_text(sampled))
    wrong, checked = [], 0
    for where, expr in all_exprs():
        for name, matchers in SELECTOR.findall(substitute(expr)):
            if name not in exported:
                continue  # skipped metrics; the test above covers the rest
            for label in set(MATCHER_LABEL.findall(matchers)) - TARGET_LABELS:
                checked += 1
                if label not in exported[name]:
                    wrong.append(f"{where}: {name} has no label {label!r} "
                                 f"(has {sorted(exported[name])})")
    assert not wrong, "\n".join(wrong)
    assert checked >= 6  # the view and result matchers of panels and rules


def test_every_panel_query_parses(tmp_path):
    dash = dashboard()
    group = [{"record": f"dashboard:panel_{i}", "expr": substitute(expr)}
             for i, (_, _, expr) in enumerate(panel_exprs(dash))]
    group += [{"record": f"dashboard:variable_{v['name']}",
               "expr": re.sub(r"^label_values\((.*), *\w+\)$", r"\1",
                              substitute(v["query"]["query"]))}
              for v in dash["templating"]["list"] if v["type"] == "query"]
    path = tmp_path / "panels.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": group}]}))
    p = run([tool("promtool"), "check", "rules", str(path)])
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"SUCCESS: {len(group)} rules found" in p.stdout


def test_dashboard_has_the_variables_and_panels(sampled):
    dash = dashboard()
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["instance"]["type"] == variables["view"]["type"] == "query"
    titles = [p["title"] for p in panels(dash)]
    for required in ("Replication lag p50 / p99", "Lag per source", "Events/s by result",
                     "Dead letters by reason",
                     "Consumer lag (Kafka messages, DynamoDB iterator age)",
                     "Index writes per event (write amplification)", "View entries",
                     "View bytes", "LMDB map use", "Query rate per method",
                     "Query errors per method", "Query p99 per method", "Batch sizes",
                     "Hot key share", "Items left out of views by reason",
                     "Partitions owned per member", "Consumer lag per member",
                     "Fan-out latency p50 / p99 per peer", "Fan-out errors per peer"):
        assert required in titles
    for p in panels(dash):
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert "$instance" in t["expr"], f"{p['title']}: not filtered by $instance"
    ids = [p["id"] for p in dash["panels"]] + [
        p["id"] for r in dash["panels"] if r["type"] == "row" for p in r.get("panels", [])]
    assert len(ids) == len(set(ids))


# ---------------------------------------------------------------- a real Prometheus

def quantile(q, buckets):
    """Prometheus's histogram_quantile over [(le, cumulative count)], sorted by le: linear
    interpolation inside the bucket that holds the rank."""
    total = buckets[-1][1]
    rank = q * total
    lower_le, lower_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return lower_le
            return lower_le + (le - lower_le) * (rank - lower_count) / (count - lower_count)
        lower_le, lower_count = le, count
    return buckets[-2][0]


class Prometheus:
    """Debian's prometheus scraping 127.0.0.1:<scrape_port> as job "cdcview" every second;
    `scrape` adds to that scrape config (scheme, tls_config, authorization)."""

    def __init__(self, workdir, scrape_port, **scrape):
        self.dir = workdir
        self.port = free_port()
        config = workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [ALERTS],
            "scrape_configs": [{"job_name": "cdcview", "scrape_interval": "1s",
                                "static_configs": [{"targets": [f"127.0.0.1:{scrape_port}"]}],
                                **scrape}],
        }))
        self.log_path = workdir / "prometheus.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [tool("prometheus"), f"--config.file={config}",
                 f"--storage.tsdb.path={workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def log(self):
        return self.log_path.read_text(errors="replace")[-3000:]

    def get(self, path, **params):
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read().decode()) if path.startswith("/api") else r.read()

    def ready(self):
        if self.proc.poll() is not None:
            pytest.fail(f"prometheus exited with {self.proc.returncode}:\n{self.log()}")
        try:
            self.get("/-/ready")
            return True
        except OSError:
            return False

    def query(self, expr):
        """{frozenset(labels): value} of an instant query."""
        r = self.get("/api/v1/query", query=expr)
        assert r["status"] == "success", r
        return {frozenset((k, v) for k, v in s["metric"].items() if k != "__name__"):
                float(s["value"][1]) for s in r["data"]["result"]}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def test_prometheus_scraping_cdcviewd_sees_what_the_daemon_reports(sampled, tmp_path):
    status = {s.name: s for s in sampled.status().sources}
    assert (status["sample"].events_applied, status["bad"].events_rejected) == (3134, 1)
    daemon_metrics = sampled.metrics()
    lag_count = metric(daemon_metrics, "cdcview_replication_lag_seconds_count")
    assert lag_count == 3134  # every sample event has a creation time

    prom = Prometheus(tmp_path, sampled.metrics_port)
    try:
        wait_for("prometheus to be ready", prom.ready, describe=prom.log)
        target = {("instance", f"127.0.0.1:{sampled.metrics_port}"), ("job", "cdcview")}

        def applied():
            got = prom.query('cdcview_events_total{result="applied"}')
            return got if len(got) == 2 else None

        got = wait_for("prometheus to scrape cdcview_events_total", applied, describe=prom.log)
        assert got == {
            frozenset(target | {("source", "sample"), ("result", "applied")}): 3134.0,
            frozenset(target | {("source", "bad"), ("result", "applied")}): 0.0,
        }
        assert prom.query("cdcview_replication_lag_seconds_count") == {frozenset(target): lag_count}
        # The lag values themselves, not only how many events had one: the histogram's sum and
        # the per-source gauge are the daemon's own. The gauge keeps the last batch's lag;
        # GetStatus's lag_seconds is readiness's, 0 for the finished sample source.
        lag_sum = metric(daemon_metrics, "cdcview_replication_lag_seconds_sum")
        assert lag_sum > 0
        assert prom.query("cdcview_replication_lag_seconds_sum") == {frozenset(target): lag_sum}
        source_lag = metric(daemon_metrics, "cdcview_source_lag_seconds", source="sample")
        assert source_lag > 0
        assert (status["sample"].state, status["sample"].lag_seconds) == ("finished", 0)
        assert prom.query('cdcview_source_lag_seconds{source="sample"}') == {
            frozenset(target | {("source", "sample")}): source_lag}
        # p99 from the recording rule equals the quantile of the daemon's own buckets.
        buckets = sorted((float(dict(labels)["le"]), value) for (name, labels), value in
                         daemon_metrics.items() if name == "cdcview_replication_lag_seconds_bucket")
        assert buckets[-1] == (float("inf"), lag_count)
        want = prom.query('histogram_quantile(0.99, cdcview_replication_lag_seconds_bucket)')
        assert want == {frozenset(target): pytest.approx(quantile(0.99, buckets))}
        assert prom.query('cdcview_events_total{result="rejected", source="bad"}') == {
            frozenset(target | {("source", "bad"), ("result", "rejected")}): 1.0}
        # The rules load and evaluate against the real series.
        groups = prom.get("/api/v1/rules")["data"]["groups"]
        assert sorted(r["name"] for g in groups for r in g["rules"]) == sorted(
            r.get("alert") or r.get("record") for r in rules())
        assert all(r["health"] != "err" for g in groups for r in g["rules"]), groups
    finally:
        prom.stop()


# ---------------------------------------------------------------- health services


def test_health_names_each_view_and_turn_serving_when_caught_up(sampled):
    channel = sampled.channel
    assert health(channel, "") == 1
    assert health(channel, "cdcview.v1.ViewService") == 1
    views = [v["name"] for t in load_yaml(EXAMPLE_CONFIG)["tables"] for v in t["views"]]
    assert len(views) == 7
    for view in views:
        # Both sources finished: lag counts as 0; the ticker runs every second.
        wait_for(f"cdcview.view.{view} SERVING",
                 lambda: health(channel, f"cdcview.view.{view}") == 1)
    wait_for("cdcview.views SERVING", lambda: health(channel, "cdcview.views") == 1)
    assert health(channel, "cdcview.view.NoSuchView") == grpc.StatusCode.NOT_FOUND


def test_a_view_whose_source_failed_is_not_serving(daemon_factory, tmp_path):
    # T's file cannot be opened: its source is in error, so T's view is stale. U's source
    # reads its (empty) file to the end: U's view turning SERVING shows the ticker ran.
    empty = tmp_path / "empty.ndjson"
    empty.write_text("")
    d = daemon_factory({
        "sources": [{"name": "gone", "table": "T", "file": {"path": str(tmp_path / "missing")}},
                    {"name": "fine", "table": "U", "file": {"path": str(empty)}}],
        "tables": [{"name": "T", "key": {"partition": "PK"},
                    "views": [{"name": "V", "partition_key": {"attribute": "g"}}]},
                   {"name": "U", "key": {"partition": "PK"},
                    "views": [{"name": "W", "partition_key": {"attribute": "g"}}]}]})
    d.start()
    wait_for("source gone in error", lambda: d.source("gone").state == "error")
    wait_for("source fine finished", lambda: d.source("fine").state == "finished")
    wait_for("cdcview.view.W SERVING", lambda: health(d.channel, "cdcview.view.W") == 1)
    time.sleep(1.2)  # one more readiness tick: V stays NOT_SERVING
    assert health(d.channel, "cdcview.view.V") == 2
    assert health(d.channel, "cdcview.views") == 2  # not every view is caught up
    assert health(d.channel, "cdcview.v1.ViewService") == 1
    d.stop()


# ---------------------------------------------------------------- drain time

def drain_bound_seconds():
    """The daemon's worst-case drain time, as its --help states it (Application::kMaxDrainTime:
    sources stop, the writer drains, gRPC calls finish)."""
    m = re.search(r"SIGTERM drains within at most (\d+) s", help_text())
    assert m, help_text()
    return int(m.group(1))


def test_the_drain_bound_is_the_sum_of_its_parts_and_documented():
    bound = drain_bound_seconds()
    assert bound == 21  # 5 s sources + 10 s writer + 5 s gRPC + 1 s slack (application.h)
    for doc in ("README.md", os.path.join("docs", "ARCHITECTURE.md")):
        with open(os.path.join(REPO, doc), encoding="utf-8") as f:
            assert f"at most {bound} s" in f.read(), doc


def measured_drain_seconds(daemon_factory):
    """SIGTERM to exit while the sample is being ingested: the longest ordinary drain."""
    d = daemon_factory({"sources": [{"name": "sample", "table": "App", "file": {"path": SAMPLE}}],
                        "tables": load_yaml(EXAMPLE_CONFIG)["tables"]}, name="drain")
    d.start()
    start = time.monotonic()
    d.stop()
    elapsed = time.monotonic() - start
    drained = re.search(r"cdcviewd stopped; drained in (\d+) ms", d.log())
    assert drained, d.log()[-2000:]
    assert int(drained.group(1)) / 1000 <= elapsed
    return elapsed


def test_a_hanging_dynamodb_request_does_not_hold_the_drain(daemon_factory):
    """A DynamoDB call in flight (here: an endpoint that accepts and never answers; the
    request timeout is 20 s) is cancelled by SIGTERM instead of waited for."""
    import dynamodb_env  # test credentials in the environment

    with socket.socket() as endpoint:
        endpoint.bind(("127.0.0.1", 0))
        endpoint.listen(8)
        endpoint.settimeout(30)
        d = daemon_factory({"sources": [dynamodb_env.source_config(
                                f"http://127.0.0.1:{endpoint.getsockname()[1]}")],
                            "tables": [{"name": "App", "key": {"partition": "PK"}}]},
                           name="hang")
        d.start()
        conn, _ = endpoint.accept()  # the source's first request, never answered
        with conn:
            conn.settimeout(30)
            assert conn.recv(4096).startswith(b"POST "), "no request arrived"
            time.sleep(0.5)
            start = time.monotonic()
            d.stop()
            elapsed = time.monotonic() - start
    assert elapsed < 5, f"drained in {elapsed:.1f} s; log:\n{d.log()[-2000:]}"
    assert "cancelled" not in d.log()  # a stop is not reported as a source error


# ---------------------------------------------------------------- Kubernetes manifests

KUSTOMIZE_CACHE = os.path.join(REPO, ".cache", "bin", "kustomize")  # scripts/install-deps.sh


def kustomize_commands():
    """The renderers at hand: `kubectl kustomize` (kubectl is not in Debian 12) and the
    standalone `kustomize build` that scripts/install-deps.sh builds (the same engine)."""
    found = []
    if shutil.which("kubectl"):
        found.append([shutil.which("kubectl"), "kustomize"])
    for candidate in (shutil.which("kustomize"), KUSTOMIZE_CACHE):
        if candidate and os.access(candidate, os.X_OK):
            found.append([candidate, "build"])
            break
    if not found:
        pytest.fail("neither kubectl nor kustomize found: run scripts/install-deps.sh (it builds "
                    f"kustomize into {KUSTOMIZE_CACHE})", pytrace=False)
    return found


def render(overlay):
    command = kustomize_commands()[0]
    p = run(command + [os.path.join(DEPLOY, "k8s", "overlays", overlay)])
    assert p.returncode == 0, f"{' '.join(command)} {overlay}:\n{p.stderr}"
    return [doc for doc in yaml.safe_load_all(p.stdout) if doc]


def cdcview_containers(docs):
    """(workload, pod spec, container) for every cdcview container of every workload."""
    out = []
    for doc in docs:
        if doc["kind"] not in ("StatefulSet", "Deployment"):
            continue
        spec = doc["spec"]["template"]["spec"]
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            if c["image"].split(":")[0] == IMAGE:
                out.append((doc, spec, c))
    return out


def find(docs, kind, name):
    hits = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} in the rendered manifests"
    return hits[0]


def help_text():
    p = run([DAEMON_BIN, "--help"])
    assert p.returncode == 0, p.stderr
    return p.stdout


def file_source(spec, container, path):
    """What puts the file at `path` into the container: (volume mount, kind, name, key).
    kind is "configMap" or "secret" for a key of a ConfigMap or Secret (a volume of its own or
    a source of a projected volume), name and key say which; for any other volume kind is the
    volume's kind ("emptyDir"; "volumeClaimTemplate" for a StatefulSet's claim) and name and
    key are None."""
    mounts = [m for m in container["volumeMounts"]
              if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mounts, f"{path}: on no volume of container {container['name']}"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    volume = {v["name"]: v for v in spec.get("volumes", [])}.get(mount["name"])
    if volume is None:
        return mount, "volumeClaimTemplate", None, None
    relative = path[len(mount["mountPath"].rstrip("/")) + 1:]
    if "projected" in volume:
        sources = volume["projected"]["sources"]
    elif "configMap" in volume or "secret" in volume:
        sources = [volume]
    else:
        return mount, next(k for k in volume if k != "name"), None, None
    for source in sources:
        for kind in ("configMap", "secret"):
            if kind not in source:
                continue
            ref = source[kind]
            name = ref.get("name") or ref.get("secretName")
            if "items" not in ref:  # every key, under its own name
                if "/" not in relative:
                    return mount, kind, name, relative
            for item in ref.get("items", []):
                if item["path"] == relative:
                    return mount, kind, name, item["key"]
    pytest.fail(f"{path}: no source of volume {mount['name']} provides it")


def pod_of(workload, ordinal=0):
    """The metadata the downward API gives the workload's pod: a StatefulSet's pod number
    `ordinal` (name cdcview-N, the pod-index label), or a Deployment's pod (a made-up name)."""
    name = workload["metadata"]["name"]
    labels = dict(workload["spec"]["template"]["metadata"].get("labels", {}))
    if workload["kind"] == "StatefulSet":
        name = f"{name}-{ordinal}"
        labels["apps.kubernetes.io/pod-index"] = str(ordinal)
    else:
        name = f"{name}-5d8c7b9f4-x2x7q"
    return {"name": name, "namespace": workload["metadata"].get("namespace", "default"),
            "labels": labels}


def container_env(container, pod):
    """The container's environment as the kubelet sets it in `pod` (pod_of): values, the
    downward API's metadata fields, and a Secret's key (a stand-in value). Any other valueFrom
    fails: nothing else is used."""
    fields = {"metadata.name": pod["name"], "metadata.namespace": pod["namespace"]}
    fields.update({f"metadata.labels['{k}']": v for k, v in pod["labels"].items()})
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "secretKeyRef" in e["valueFrom"]:
            ref = e["valueFrom"]["secretKeyRef"]
            env[e["name"]] = f"secret-{ref['name']}-{ref['key']}"
        else:
            assert list(e["valueFrom"]) == ["fieldRef"], e
            env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


# Variables the daemon reads that are no config field (so --help does not list them): the
# header and constant that name each.
DAEMON_VARIABLES = {"CDCVIEW_CLUSTER_TOKEN": ("daemon/server/cluster_peers.h", "kClusterTokenEnv")}


def daemon_reads_variable(name):
    if name not in DAEMON_VARIABLES:
        return False
    header, constant = DAEMON_VARIABLES[name]
    path = os.path.join(REPO, header)
    if not os.path.exists(path):
        return False
    with open(path, encoding="utf-8") as f:
        return f'{constant}[] = "{name}";' in f.read()


def effective_config(docs, spec, container, tmp_path, pod):
    """What cdcviewd makes of the container in `pod` (pod_of): its ConfigMap file, args and
    environment."""
    args = list(container["args"])
    config_path = args[args.index("--config") + 1]
    _, kind, name, key = file_source(spec, container, config_path)
    assert kind == "configMap", f"{config_path} comes from a {kind}"
    configmap = find(docs, "ConfigMap", name)
    local = tmp_path / os.path.basename(config_path)
    local.write_text(configmap["data"][key])
    args[args.index("--config") + 1] = str(local)
    env = container_env(container, pod)
    p = run([DAEMON_BIN] + args + ["--print-config"], env={**env, "PATH": os.environ["PATH"]})
    assert p.returncode == 0, f"cdcviewd rejects the ConfigMap with the container's settings:\n{p.stderr}"
    return yaml.safe_load(p.stdout), env


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def quantity_bytes(text):
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(text[:-2]) * factor
    return int(text)


def config_bytes(text):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
    for unit, factor in units.items():
        if str(text).endswith(unit):
            return int(text[:-3]) * factor
    return int(text)


# The readiness probe's health service: queries are served (a replica of everything serves
# while catching up), or, for a cluster member, its own partitions are caught up.
READINESS = {"statefulset": "cdcview.v1.ViewService", "sidecar": "cdcview.v1.ViewService",
             "partitioned": "cdcview.views"}
# The startup probe's: every view caught up (a replica of everything takes traffic fresh), or,
# for a cluster member, whose readiness says that, the store open: a member that gains
# partitions reads their whole history, longer than a startup budget may allow.
STARTUP = {"statefulset": "cdcview.views", "sidecar": "cdcview.views", "partitioned": ""}


def test_every_overlay_is_tested():
    assert sorted(OVERLAYS) == sorted(os.listdir(os.path.join(DEPLOY, "k8s", "overlays")))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubectl_and_standalone_kustomize_render_the_same(overlay):
    commands = kustomize_commands()
    if len(commands) < 2:
        pytest.skip("only one of kubectl and kustomize is installed")
    outputs = [run(c + [os.path.join(DEPLOY, "k8s", "overlays", overlay)]) for c in commands]
    assert [o.returncode for o in outputs] == [0, 0], [o.stderr for o in outputs]
    assert outputs[0].stdout == outputs[1].stdout


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kustomize_renders_the_overlay(overlay):
    docs = render(overlay)
    kinds = sorted({d["kind"] for d in docs})
    assert {"ConfigMap", "ServiceMonitor"} <= set(kinds)
    if overlay in ("statefulset", "partitioned"):
        assert {"StatefulSet", "Service", "PodDisruptionBudget", "Namespace"} <= set(kinds)
        sts = find(docs, "StatefulSet", "cdcview")
        assert sts["spec"]["serviceName"] == "cdcview-headless"
        assert find(docs, "Service", "cdcview-headless")["spec"]["clusterIP"] == "None"
        assert find(docs, "Service", "cdcview")["spec"].get("clusterIP") != "None"
        assert find(docs, "PodDisruptionBudget", "cdcview")["spec"]["maxUnavailable"] == 1
    else:
        assert "StatefulSet" not in kinds and "PodDisruptionBudget" not in kinds
        deployment = find(docs, "Deployment", "orders-app")
        names = [c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]]
        assert names == ["app"]
    assert len(cdcview_containers(docs)) == 1


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_manifests_agree_with_the_binary(overlay, tmp_path, daemon_factory):
    docs = render(overlay)
    flags_help = help_text()
    [(workload, spec, c)] = cdcview_containers(docs)
    config, env = effective_config(docs, spec, c, tmp_path, pod_of(workload))

    # Flags and environment variables the container uses are the binary's.
    for flag in (a for a in c["args"] if a.startswith("--")):
        assert re.search(rf"^\s*{re.escape(flag)}\b", flags_help, re.M), f"{flag} not in --help"
    for name in env:
        # A flag's variable, or one of the config fields' variables --help lists.
        assert (f"Env:{name}" in flags_help or
                re.search(rf"^\s+{name}\s+\(", flags_help, re.M) or
                daemon_reads_variable(name)), f"{name}: not in --help, not read by the daemon"

    # Ports: probes and the ports the container declares are the ones cdcviewd listens on.
    # The kubelet's gRPC probes connect to the pod IP, without TLS or a token: they go to
    # server.health, which listens on all interfaces. gRPC does too where other pods are its
    # clients (statefulset); as a sidecar it serves the pod's own app, on loopback, like the
    # fast read port.
    server = config["server"]
    grpc_port, metrics_port = port_of(server["grpc"]), port_of(server["metrics"])
    assert server["health"], "no server.health: the kubelet's probes need the plaintext port"
    health_port = port_of(server["health"])
    assert server["health"].rsplit(":", 1)[0] in ("0.0.0.0", "[::]")
    assert server["metrics"].rsplit(":", 1)[0] in ("0.0.0.0", "[::]")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    if workload["kind"] == "StatefulSet":
        assert server["grpc"].rsplit(":", 1)[0] in ("0.0.0.0", "[::]")
        assert sorted(ports.values()) == sorted([grpc_port, metrics_port, health_port])
    else:
        assert server["grpc"].rsplit(":", 1)[0] in ("127.0.0.1", "[::1]"), server["grpc"]
        assert sorted(ports.values()) == sorted([metrics_port, health_port])
    fast = server["fast_reads"]
    assert fast == "" or fast.rsplit(":", 1)[0] in ("127.0.0.1", "[::1]"), fast
    listeners = [grpc_port, metrics_port, health_port] + ([port_of(fast)] if fast else [])
    assert len(set(listeners)) == len(listeners), f"two listeners on one port: {listeners}"

    # Probes: native gRPC on the health port, with names the daemon serves; none is tied to a
    # view, so the ConfigMap's views may change without touching the probes.
    probes = {k: c[k] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
    for kind, probe in probes.items():
        assert probe["grpc"]["port"] == health_port, kind
    assert probes["startupProbe"]["grpc"]["service"] == STARTUP[overlay]
    assert probes["livenessProbe"]["grpc"]["service"] == ""
    assert probes["readinessProbe"]["grpc"]["service"] == READINESS[overlay]
    startup = probes["startupProbe"]
    # Start-up (verifying the store after an unclean shutdown) may take long; the startup
    # probe allows half an hour before a restart.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800

    # The names really are served, on the health port: a daemon on this ConfigMap's tables
    # answers them there, in plaintext.
    health_addr = f"127.0.0.1:{free_port()}"
    d = daemon_factory({"tables": config["tables"],
                        "server": {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0",
                                   "health": health_addr}}, name=f"probe-{overlay}")
    d.start()
    with grpc.insecure_channel(health_addr) as channel:
        for kind, probe in probes.items():
            # cdcview.views turns SERVING on the readiness ticker's first round (no sources).
            wait_for(f"{kind} SERVING", lambda: health(channel, probe["grpc"]["service"]) == 1)
    d.stop()

    # Metrics: the ServiceMonitor's port resolves to the container port cdcviewd serves on.
    monitor = find(docs, "ServiceMonitor", "cdcview")
    selected = [s for s in docs if s["kind"] == "Service" and all(
        s["metadata"].get("labels", {}).get(k) == v
        for k, v in monitor["spec"]["selector"]["matchLabels"].items())]
    assert len(selected) == 1
    pod_labels = workload["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in selected[0]["spec"]["selector"].items())
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    [service_port] = [p for p in selected[0]["spec"]["ports"] if p["name"] == endpoint["port"]]
    assert ports[service_port["targetPort"]] == metrics_port
    for service in (s for s in docs if s["kind"] == "Service"):
        for p in service["spec"]["ports"]:
            target = p["targetPort"]
            assert (ports.get(target) if isinstance(target, str) else target) in ports.values()

    # Storage: the store lives on the data volume, which has room for the map's ceiling.
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    data_volume = mounts[config["storage"]["path"]]
    ceiling = config_bytes(config["storage"]["max_map_size"])
    if workload["kind"] == "StatefulSet":
        [claim] = [t for t in workload["spec"]["volumeClaimTemplates"]
                   if t["metadata"]["name"] == data_volume]
        assert quantity_bytes(claim["spec"]["resources"]["requests"]["storage"]) > ceiling
    else:
        [volume] = [v for v in spec["volumes"] if v["name"] == data_volume]
        assert quantity_bytes(volume["emptyDir"]["sizeLimit"]) > ceiling

    # Runs as the image's non-root user, with requests and limits.
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == dockerfile_uid()
    assert c["resources"]["requests"] and c["resources"]["limits"]

    # SIGTERM drains within the grace period: above the daemon's bound and what it took here.
    grace = spec["terminationGracePeriodSeconds"]
    assert grace > drain_bound_seconds()
    assert grace > measured_drain_seconds(daemon_factory)


# ---------------------------------------------------------------- the partitioned cluster

PARTITIONED = "partitioned"


def test_the_partitioned_overlay_is_a_cluster_of_three_members():
    docs = render(PARTITIONED)
    [(sts, spec, c)] = cdcview_containers(docs)
    namespace, name = sts["metadata"]["namespace"], sts["metadata"]["name"]
    assert (sts["kind"], namespace, name) == ("StatefulSet", "cdcview", "cdcview")
    assert sts["spec"]["replicas"] == 3
    # Members start in any order (each waits for its peers, answering its own health).
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    # A volume per member: its own store of its own partitions.
    [claim] = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert {"name": "data", "mountPath": "/var/lib/cdcview"} in c["volumeMounts"]
    assert "data" not in [v["name"] for v in spec["volumes"]]

    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    grpc_port = {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"]
    # The members' Service: headless, and publishing members that are not ready yet, so
    # members that start together or catch up find each other.
    headless = find(docs, "Service", sts["spec"]["serviceName"])
    assert headless["metadata"]["name"] == "cdcview-headless"
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert selects({"matchLabels": headless["spec"]["selector"]}, pod_labels)
    assert {"name": "grpc", "port": grpc_port, "targetPort": "grpc"} in headless["spec"]["ports"]
    # Clients: one Service over every (ready) member; any member answers for the cluster.
    client = find(docs, "Service", "cdcview")
    assert "clusterIP" not in client["spec"] and not client["spec"].get(
        "publishNotReadyAddresses")
    assert client["spec"]["selector"] == {"app.kubernetes.io/name": "cdcview"}
    assert selects({"matchLabels": client["spec"]["selector"]}, pod_labels)
    assert client["spec"]["ports"] == [{"name": "grpc", "port": 50051, "targetPort": "grpc"}]
    # One member at a time may be evicted.
    [pdb] = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {
        "matchLabels": {"app.kubernetes.io/name": "cdcview"}}}
    assert selects(pdb["spec"]["selector"], pod_labels)

    # The cluster's variables: members = replicas, the ordinal from the pod's name, the peers
    # a template over the headless Service's per-pod names.
    cluster_env = [e for e in c["env"] if e["name"].startswith("CDCVIEW_CLUSTER_")]
    assert cluster_env == [
        {"name": "CDCVIEW_CLUSTER_MEMBERS", "value": "3"},
        {"name": "CDCVIEW_CLUSTER_ORDINAL",
         "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "CDCVIEW_CLUSTER_PEERS",
         "value": "cdcview-{i}.cdcview-headless.cdcview.svc:50051"},
        {"name": "CDCVIEW_CLUSTER_TOKEN",
         "valueFrom": {"secretKeyRef": {"name": "cdcview-cluster-token", "key": "token"}}},
    ]
    # Probes: started and alive once the store is open; ready once this member's partitions
    # are caught up (every view within server.ready_max_lag_seconds of its sources).
    assert c["livenessProbe"]["grpc"]["service"] == ""
    assert c["startupProbe"]["grpc"]["service"] == ""
    assert c["readinessProbe"]["grpc"]["service"] == "cdcview.views"


def test_each_partitioned_member_gets_its_ordinal_and_every_peer(tmp_path):
    """cdcviewd, given pod N's environment, is member N of 3 and names every member's gRPC
    address as the headless Service's DNS name of that pod."""
    docs = render(PARTITIONED)
    [(sts, spec, c)] = cdcview_containers(docs)
    namespace, service = sts["metadata"]["namespace"], sts["spec"]["serviceName"]
    grpc_port = {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"]
    members = sts["spec"]["replicas"]
    peers = [f"{pod_of(sts, i)['name']}.{service}.{namespace}.svc:{grpc_port}"
             for i in range(members)]
    assert peers == [f"cdcview-{i}.cdcview-headless.cdcview.svc:50051" for i in range(3)]
    for ordinal in range(members):
        config, _ = effective_config(docs, spec, c, tmp_path, pod_of(sts, ordinal))
        assert config["cluster"] == {"members": 3, "ordinal": ordinal, "peers": peers}
        # Kafka sources only, read from the start: a member that gains partitions after a
        # resize reads their whole history.
        assert [(s["name"], sorted(s)) for s in config["sources"]] == [
            ("app", ["kafka", "name", "table"])]
        assert config["sources"][0]["kafka"]["start"] == "earliest"
        assert config["server"]["grpc"] == f"0.0.0.0:{grpc_port}"
    # The certificate the members verify each other with names every peer, and they present
    # it to each other as their client certificate.
    certificate = tls_doc_objects("Certificate")[CERTIFICATES[PARTITIONED]]["spec"]
    for peer in peers:
        host = peer.rsplit(":", 1)[0]
        assert f"*.{host.split('.', 1)[1]}" in certificate["dnsNames"], host
    assert "client auth" in certificate["usages"]
    # Their token (CDCVIEW_CLUSTER_TOKEN) is an entry of the tokens file that reads everything.
    [tokens] = [d for d in tls_doc_yaml() if "tokens" in d]
    assert {"name": "cdcview-cluster", "token": "<the members' token>",
            "views": "all"} in tokens["tokens"]


# ---------------------------------------------------------------- hardening, TLS and access

TLS_DOC = os.path.join(REPO, "docs", "TLS.md")
# The daemon's own certificate in each overlay: a cert-manager Certificate in docs/TLS.md.
CERTIFICATES = {"statefulset": "cdcview", "sidecar": "orders-app-cdcview",
                "partitioned": "cdcview"}
# Overlays whose clients (and Prometheus) present a client certificate.
MTLS = {"statefulset": True, "sidecar": False, "partitioned": True}
CLIENT_PEERS = [{"namespaceSelector": {},
                 "podSelector": {"matchLabels": {"cdcview.io/client": "true"}}}]
MONITORING_PEERS = [{"namespaceSelector": {
    "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
# The partitioned cluster's members, which call each other (same namespace).
MEMBER_PEERS = [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "cdcview"}}}]


def tls_doc():
    with open(TLS_DOC, encoding="utf-8") as f:
        return f.read()


def tls_doc_yaml():
    """Every YAML document of docs/TLS.md's yaml blocks."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", tls_doc(), re.M | re.S)
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if doc]


def tls_doc_objects(kind):
    return {d["metadata"]["name"]: d for d in tls_doc_yaml() if d.get("kind") == kind}


def cdcview_workload(overlay, tmp_path):
    docs = render(overlay)
    [(workload, spec, c)] = cdcview_containers(docs)
    config, _ = effective_config(docs, spec, c, tmp_path, pod_of(workload))
    return docs, workload, spec, c, config


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def leaves(value, key):
    """Every value of `key` anywhere inside `value` (dicts and lists)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == key:
                yield v
            yield from leaves(v, key)
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v, key)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_container_is_locked_down(overlay, tmp_path):
    docs, workload, spec, c, config = cdcview_workload(overlay, tmp_path)
    pod, own = spec.get("securityContext", {}), c.get("securityContext", {})
    assert own.get("runAsNonRoot", pod.get("runAsNonRoot")) is True
    assert own.get("seccompProfile", pod.get("seccompProfile")) == {"type": "RuntimeDefault"}
    assert own.get("readOnlyRootFilesystem") is True
    assert own.get("allowPrivilegeEscalation") is False
    assert own.get("capabilities") == {"drop": ["ALL"]}
    assert not own.get("privileged")
    # With a read-only root, everything the daemon writes is on a writable volume of its own:
    # the store and the dead-letter files (below the store unless configured elsewhere).
    written = [config["storage"]["path"]] + list(leaves(config["sources"], "dead_letter_path"))
    assert len(written) == 1 + len(config["sources"]), written
    for path in written:
        mount, kind, _, _ = file_source(spec, c, path)
        assert kind in ("volumeClaimTemplate", "emptyDir"), (path, kind)
        assert not mount.get("readOnly"), path
    # Config and Secrets are mounted read-only and whole: a subPath mount is never updated,
    # and renewed certificates and tokens must reach the running daemon.
    for mount in c["volumeMounts"]:
        assert "subPath" not in mount and "subPathExpr" not in mount, mount
        if mount["mountPath"] not in written:
            assert mount.get("readOnly") is True, mount


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_tls_and_tokens_come_from_mounted_secrets(overlay, tmp_path):
    docs, workload, spec, c, config = cdcview_workload(overlay, tmp_path)
    server = config["server"]
    want = {"tls_cert_file": ("cdcview-tls", "tls.crt"),
            "tls_key_file": ("cdcview-tls", "tls.key"),
            "tokens_file": ("cdcview-tokens", "tokens.yaml")}
    if MTLS[overlay]:
        want["tls_client_ca_file"] = ("cdcview-tls", "ca.crt")
    else:
        assert server.get("tls_client_ca_file", "") == ""  # an empty path is not printed
    for field, (secret, key) in want.items():
        assert server[field], f"server.{field} is not set"
        _, kind, name, got = file_source(spec, c, server[field])
        assert (kind, name, got) == ("secret", secret, key), field
    assert os.path.dirname(server["tls_cert_file"]) == "/etc/cdcview/tls"
    assert server["tokens_file"] == "/etc/cdcview/auth/tokens.yaml"
    assert server["tls_metrics"] is True
    if workload["kind"] == "Deployment":
        # The sidecar's app verifies the daemon with the CA and sends its own token; it gets
        # neither the daemon's key nor the token file.
        [app] = [a for a in spec["containers"] if a["name"] == "app"]
        env = {e["name"]: e["value"] for e in app["env"]}
        assert file_source(spec, app, env["CDCVIEW_TLS_CA"])[1:] == ("secret", "cdcview-tls",
                                                                     "ca.crt")
        assert file_source(spec, app, env["CDCVIEW_TOKEN_FILE"])[1:] == (
            "secret", "orders-app-cdcview-token", "token")
        volumes = {v["name"]: v for v in spec["volumes"]}
        app_keys = [(key, name) for m in app["volumeMounts"]
                    for name, key in secret_keys(volumes[m["name"]])]
        assert ("tls.key", "cdcview-tls") not in app_keys and not any(
            name == "cdcview-tokens" for _, name in app_keys), app_keys


def secret_keys(volume):
    """(Secret name, key) of every Secret key a volume mounts ("*": all its keys)."""
    sources = volume["projected"]["sources"] if "projected" in volume else [volume]
    out = []
    for source in sources:
        if "secret" in source:
            ref = source["secret"]
            name = ref.get("name") or ref.get("secretName")
            out += [(name, i["key"]) for i in ref["items"]] if "items" in ref else [(name, "*")]
    return out


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policy_admits_the_apps_and_monitoring_only(overlay, tmp_path):
    docs, workload, spec, c, config = cdcview_workload(overlay, tmp_path)
    pod_labels = workload["spec"]["template"]["metadata"]["labels"]
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy"
                and selects(d["spec"]["podSelector"], pod_labels)]
    assert "Ingress" in policy["spec"]["policyTypes"]
    named = {p["name"]: p["containerPort"]
             for container in spec["containers"] + spec.get("initContainers", [])
             for p in container.get("ports", [])}
    admitted = {}  # port -> the peers of each rule that admits it (None: anyone)
    for rule in policy["spec"]["ingress"]:
        assert rule.get("ports"), f"a rule without ports admits every port: {rule}"
        for p in rule["ports"]:
            port = named[p["port"]] if isinstance(p["port"], str) else p["port"]
            admitted.setdefault(port, []).append(rule.get("from"))
    server = config["server"]
    grpc_port, metrics_port = port_of(server["grpc"]), port_of(server["metrics"])
    # /metrics: Prometheus's namespace only. Health: no rule; the kubelet probes from the node.
    assert admitted.pop(metrics_port) == [MONITORING_PEERS]
    assert port_of(server["health"]) not in admitted
    if workload["kind"] == "StatefulSet":
        # gRPC: pods that carry the client label, from any namespace (docs/TLS.md); in the
        # partitioned cluster also the other members.
        want = [CLIENT_PEERS, MEMBER_PEERS] if overlay == PARTITIONED else [CLIENT_PEERS]
        assert admitted.pop(grpc_port) == want
        assert admitted == {}
    else:
        # gRPC and fast reads are on loopback; only the app's own port is left open.
        assert grpc_port not in admitted
        assert sorted(admitted) == [named["http"]]
    doc = tls_doc()
    assert 'cdcview.io/client: "true"' in doc and "kubernetes.io/metadata.name" in doc


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_service_monitor_scrapes_over_tls_with_a_token(overlay):
    docs = render(overlay)
    monitor = find(docs, "ServiceMonitor", "cdcview")
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    tls = endpoint["tlsConfig"]
    assert tls["ca"] == {"secret": {"name": "cdcview-tls", "key": "ca.crt"}}
    assert not tls.get("insecureSkipVerify")
    # Prometheus connects to pod IPs: it verifies a name the daemon's certificate carries.
    certificate = tls_doc_objects("Certificate")[CERTIFICATES[overlay]]
    assert certificate["spec"]["secretName"] == "cdcview-tls"
    assert tls["serverName"] in certificate["spec"]["dnsNames"]
    assert endpoint["authorization"] == {
        "type": "Bearer", "credentials": {"name": "cdcview-metrics-token", "key": "token"}}
    assert not {"bearerTokenSecret", "bearerTokenFile", "basicAuth"} & set(endpoint)
    if MTLS[overlay]:
        client = tls_doc_objects("Certificate")["cdcview-prometheus"]
        assert "client auth" in client["spec"]["usages"]
        assert client["metadata"]["namespace"] == monitor["metadata"]["namespace"]
        name = client["spec"]["secretName"]
        assert tls["cert"] == {"secret": {"name": name, "key": "tls.crt"}}
        assert tls["keySecret"] == {"name": name, "key": "tls.key"}
    else:
        assert "cert" not in tls and "keySecret" not in tls


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_documented_certificate_names_what_clients_connect_to(overlay):
    docs = render(overlay)
    certificate = tls_doc_objects("Certificate")[CERTIFICATES[overlay]]
    names = certificate["spec"]["dnsNames"]
    # The partitioned overlay's members present the daemon's certificate to each other.
    assert certificate["spec"]["usages"] == (
        ["server auth", "client auth"] if CERTIFICATES[overlay] == CERTIFICATES[PARTITIONED]
        else ["server auth"])
    [(workload, spec, c)] = cdcview_containers(docs)
    namespace = workload["metadata"].get("namespace")
    assert certificate["metadata"].get("namespace") == namespace
    if workload["kind"] == "StatefulSet":
        for service in (d for d in docs if d["kind"] == "Service"):
            assert f"{service['metadata']['name']}.{namespace}.svc" in names
        assert f"*.{workload['spec']['serviceName']}.{namespace}.svc" in names  # each pod
    else:
        [app] = [a for a in spec["containers"] if a["name"] == "app"]
        env = {e["name"]: e["value"] for e in app["env"]}
        assert env["CDCVIEW_ADDR"].rsplit(":", 1)[0] in names
        assert env["CDCVIEW_FAST_READS_ADDR"].rsplit(":", 1)[0] in names
    # Signed by the CA issuer whose certificate the Secret's ca.crt carries.
    issuer = tls_doc_objects("ClusterIssuer")[certificate["spec"]["issuerRef"]["name"]]
    [ca] = [d for d in tls_doc_objects("Certificate").values()
            if d["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]]
    assert ca["spec"]["isCA"] is True


def test_every_secret_the_manifests_use_is_documented():
    """Each Secret a pod mounts or the ServiceMonitor reads is in docs/TLS.md's table and
    made there: by a cert-manager Certificate or a `kubectl create secret` line."""
    doc = tls_doc()
    made = {c["spec"]["secretName"] for c in tls_doc_objects("Certificate").values()}
    made |= set(re.findall(r"kubectl .*create secret generic (\S+)", doc))
    used = set()
    for overlay in OVERLAYS:
        docs = render(overlay)
        for workload in (d for d in docs if d["kind"] in ("StatefulSet", "Deployment")):
            for volume in workload["spec"]["template"]["spec"]["volumes"]:
                used |= {name for name, _ in secret_keys(volume)}
            used |= {ref["name"] for ref in leaves(workload["spec"]["template"], "secretKeyRef")}
        monitor = find(docs, "ServiceMonitor", "cdcview")
        used |= set(leaves(monitor["spec"]["endpoints"], "name")) - {None}
    assert sorted(used) == sorted({"cdcview-tls", "cdcview-tokens", "cdcview-metrics-token",
                                   "cdcview-prometheus-tls", "orders-app-cdcview-token",
                                   "cdcview-cluster-token"})
    table = set(re.findall(r"^\| `([a-z0-9-]+)` \|", doc, re.M))
    assert sorted(used - table) == [] and sorted(used - made) == []
    # The token file example is a valid token file: Prometheus's entry may scrape /metrics.
    [tokens] = [d for d in tls_doc_yaml() if "tokens" in d]
    entries = {t["name"]: t for t in tokens["tokens"]}
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+", name) for name in entries)
    assert entries["prometheus"]["metrics"] is True and entries["prometheus"]["views"] == []
    assert not entries["orders-app"].get("metrics", False)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_pod_runs_as_its_service_account_without_an_api_token(overlay):
    docs = render(overlay)
    [(workload, spec, c)] = cdcview_containers(docs)
    account = find(docs, "ServiceAccount", spec["serviceAccountName"])
    assert account["automountServiceAccountToken"] is False
    assert spec["automountServiceAccountToken"] is False
    # IAM roles for service accounts: the overlay fills the base's empty slot with a role
    # for its DynamoDB source. The partitioned cluster reads Kafka only: no role.
    role = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    if overlay == PARTITIONED:
        assert role == ""
    else:
        assert re.fullmatch(r"arn:aws:iam::\d{12}:role/[\w+=,.@-]+", role), role
    if workload["kind"] == "Deployment":
        # Only the cdcview container gets the role's credentials.
        others = [x["name"] for x in spec["containers"] if x is not c]
        assert workload["spec"]["template"]["metadata"]["annotations"][
            "eks.amazonaws.com/skip-containers"] == ",".join(others)


def test_the_base_leaves_the_iam_role_empty():
    command = kustomize_commands()[0]
    p = run(command + [os.path.join(DEPLOY, "k8s", "base")])
    assert p.returncode == 0, p.stderr
    docs = [d for d in yaml.safe_load_all(p.stdout) if d]
    account = find(docs, "ServiceAccount", "cdcview")
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": ""}


# ---------------------------------------------------------------- Dockerfile (static)

def dockerfile_stages():
    """[(FROM line, [instruction lines])], continuation lines joined."""
    with open(DOCKERFILE, encoding="utf-8") as f:
        text = re.sub(r"\\\n", " ", f.read())
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append((line, []))
        else:
            stages[-1][1].append(line)
    return stages


def apt_installed(instructions):
    pkgs = set()
    for line in instructions:
        for m in re.finditer(r"apt-get install ([^&;]*)", line):
            pkgs.update(w for w in m.group(1).split() if not w.startswith("-"))
    return pkgs


def dockerfile_uid():
    _, runtime = dockerfile_stages()[-1]
    [user] = [line.split()[1] for line in runtime if line.upper().startswith("USER ")]
    return int(user.split(":")[0])


def owners(libs):
    """Library path -> the Debian package owning it (one dpkg -S for all; usrmerge means
    dpkg may know /lib/... as /usr/lib/... or the reverse)."""
    variants = {}
    for lib in libs:
        for v in (lib, lib[4:] if lib.startswith("/usr/") else "/usr" + lib):
            variants[v] = lib
    q = run(["dpkg", "-S"] + sorted(variants))  # exit 1 for the variants dpkg does not know
    out = {}
    for line in q.stdout.splitlines():
        pkg, _, path = line.partition(": ")
        if path in variants:
            out[variants[path]] = pkg.split(":")[0]
    unowned = sorted(set(libs) - set(out))
    assert not unowned, f"no Debian package owns {unowned}"
    return out


def shared_library_packages(binary):
    """({package of each library `binary` links directly}, {package of each it loads})."""
    p = run(["ldd", binary])
    assert p.returncode == 0, p.stderr
    resolved = dict(re.findall(r"^\s*(\S+) => (/\S+)", p.stdout, re.M))
    assert resolved, p.stdout
    d = run(["readelf", "-d", binary])
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", d.stdout)
    assert needed, d.stdout
    pkg = owners(resolved.values())
    return {pkg[resolved[n]] for n in needed}, set(pkg.values())


def dependency_closure(packages):
    """`packages` and everything they depend on (installed packages; all alternatives)."""
    seen, todo = set(), list(packages)
    while todo:
        pkg = todo.pop()
        if pkg in seen:
            continue
        seen.add(pkg)
        q = run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", pkg])
        if q.returncode != 0:
            continue  # not installed here: an alternative that is not used
        for dep in re.split(r"[,|]", q.stdout):
            name = dep.strip().split(" ")[0].split(":")[0]
            if name:
                todo.append(name)
    return seen


def test_dockerfile_is_multi_stage_non_root_with_the_daemon_as_entrypoint():
    stages = dockerfile_stages()
    assert len(stages) == 2
    (build_from, build), (runtime_from, runtime) = stages
    assert build_from.split()[1] == "debian:12" and build_from.split()[-1] == "build"
    assert runtime_from.split()[1] == "debian:12-slim"
    assert any("scripts/build.sh" in line for line in build)
    joined = "\n".join(runtime)
    assert re.search(r"^ENTRYPOINT \[\"/usr/local/bin/cdcviewd\"\]$", joined, re.M)
    assert re.search(r"^CMD \[\"--config\", \"/etc/cdcview/cdcview.yaml\"\]$", joined, re.M)
    assert re.search(r"^EXPOSE 50051 9464$", joined, re.M)
    assert dockerfile_uid() != 0
    assert re.search(r"^VOLUME /var/lib/cdcview$", joined, re.M)
    # Its environment sets the same ports and paths, and only variables the binary reads.
    env = dict(re.findall(r"(CDCVIEW_[A-Z_]+)=(\S+)", joined))
    flags_help = help_text()
    for name in env:
        assert f"Env:{name}" in flags_help, name
    assert env["CDCVIEW_STORAGE_PATH"] == "/var/lib/cdcview"
    assert (port_of(env["CDCVIEW_GRPC"]), port_of(env["CDCVIEW_METRICS"])) == (50051, 9464)


BASE_IMAGE_PACKAGES = {"libc6", "libstdc++6", "libgcc-s1"}  # in debian:12-slim already


def test_runtime_stage_installs_every_shared_library_and_nothing_else(binaries):
    listed = apt_installed(dockerfile_stages()[-1][1])
    direct, loaded = set(), set()
    for binary in (DAEMON_BIN, CLI_BIN):
        d, l = shared_library_packages(binary)
        direct |= d - BASE_IMAGE_PACKAGES
        loaded |= l - BASE_IMAGE_PACKAGES
    assert "libgrpc++1.51" in direct  # guards against an empty readelf/ldd
    # Every library the binaries link is named; what those load comes with them (apt).
    assert sorted(direct - listed) == [], "add to deploy/Dockerfile's runtime stage"
    assert sorted(loaded - dependency_closure(listed)) == []
    # Only runtime libraries: nothing unused, no -dev package.
    assert sorted(listed - direct - {"ca-certificates"}) == [], "not needed by the binaries"


def source_package(pkg):
    q = run(["dpkg-query", "-W", "-f=${source:Package}", pkg])
    assert q.returncode == 0, f"{pkg} is not a Debian 12 package installed here: {q.stderr}"
    return q.stdout.strip()


def test_build_stage_copies_what_cmake_builds_and_installs_every_dev_package(binaries):
    """Without a docker daemon the image cannot be built here; this checks the build stage
    statically against the tree and the host's (same Debian 12) packages: a missing source
    directory, build dependency or ignore rule fails."""
    (_, build), (_, runtime) = dockerfile_stages()
    copied = [line.split()[1] for line in build if line.upper().startswith("COPY ")]
    for src in copied:
        assert os.path.exists(os.path.join(REPO, src)), src
    # CMake's subdirectories outside the tests block are all copied; the tests are off.
    with open(os.path.join(REPO, "CMakeLists.txt"), encoding="utf-8") as f:
        cmake = f.read()
    product = cmake.split("if(CDCVIEW_BUILD_TESTS)")[0]
    subdirs = re.findall(r"add_subdirectory\((\w+)\)", product)
    assert subdirs and sorted(set(subdirs) - set(copied)) == []
    assert any("-DCDCVIEW_BUILD_TESTS=OFF" in line for line in build)
    assert "scripts/build.sh" in copied
    # The build context lets through exactly what is copied.
    with open(DOCKERFILE + ".dockerignore", encoding="utf-8") as f:
        rules = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    assert rules[0] == "*"
    assert sorted(r[1:] for r in rules[1:]) == sorted(copied)
    # Every runtime library has its -dev package (same Debian source) in the build stage.
    build_pkgs = apt_installed(build)
    build_sources = {source_package(p) for p in build_pkgs}
    runtime_pkgs = apt_installed(runtime) - {"ca-certificates"}
    missing = {p: source_package(p) for p in runtime_pkgs
               if source_package(p) not in build_sources}
    assert not missing, f"no -dev package in the build stage for {missing}"
    # Header-only or build-time packages that no runtime library stands for.
    assert {"cmake", "ninja-build", "protobuf-compiler-grpc", "libcli11-dev",
            "libboost1.74-dev"} <= build_pkgs


# ---------------------------------------------------------------- flags and environment

def print_config(args, env=None, cwd=REPO):
    p = subprocess.run([DAEMON_BIN] + args + ["--print-config"], capture_output=True, text=True,
                       env={"PATH": os.environ["PATH"], **(env or {})}, cwd=cwd, timeout=30)
    return p


# The server section's limits and security settings as --print-config prints their defaults.
SERVER_DEFAULTS = {
    "health": "", "tls_metrics": True,
    "max_wait_ms": 10000, "fast_reads_max_request_bytes": "4MiB",
    "fast_reads_max_buffered_per_connection": "16MiB", "fast_reads_max_buffered_bytes": "256MiB",
    "fast_reads_max_waits_per_connection": 4, "fast_reads_max_connections": 1024,
    "fast_reads_idle_timeout_ms": 300000, "fast_reads_request_timeout_ms": 10000,
    "dynamodb": "", "dynamodb_threads": 0, "dynamodb_max_connections": 1024,
    "dynamodb_max_request_bytes": "1MiB", "dynamodb_idle_timeout_ms": 300000,
    "dynamodb_request_timeout_ms": 10000, "dynamodb_max_waits": 256,
    "dynamodb_max_pages": 64,
    "grpc_max_connections": 1000, "grpc_max_connection_idle_seconds": 300,
    "grpc_max_connection_age_seconds": 3600, "grpc_max_connection_age_grace_seconds": 300,
    "grpc_min_ping_interval_seconds": 300, "grpc_max_ping_strikes": 2, "fd_reserve": 256}


def test_flags_override_environment_which_overrides_the_file(binaries):
    env = {"CDCVIEW_GRPC": "127.0.0.1:7000", "CDCVIEW_METRICS": "127.0.0.1:7100",
           "CDCVIEW_STORAGE_PATH": "/tmp/env-store", "CDCVIEW_SERVER_FAST_READS": "127.0.0.1:7200"}
    p = print_config(["--config", EXAMPLE_CONFIG, "--grpc", "127.0.0.1:7001"], env)
    assert p.returncode == 0, p.stderr
    got = yaml.safe_load(p.stdout)
    assert got["server"] == {"grpc": "127.0.0.1:7001", "fast_reads": "127.0.0.1:7200",
                             "metrics": "127.0.0.1:7100", "ready_max_lag_seconds": 60,
                             **SERVER_DEFAULTS}
    assert got["storage"] == {"path": "/tmp/env-store", "map_size": "4GiB",
                              "max_map_size": "64GiB", "write_map": True, "flush_interval_ms": 0,
                              "verify_at_start": "auto"}
    # The default dead-letter file moves with the store.
    assert got["sources"][0]["file"]["dead_letter_path"] == "/tmp/env-store/dead-letters/sample.ndjson"
    plain = yaml.safe_load(print_config(["--config", EXAMPLE_CONFIG]).stdout)
    assert plain["server"]["grpc"] == "127.0.0.1:50051"
    assert plain["storage"]["path"] == "./data"
    # An empty variable counts as unset (CLI11); an empty flag value disables metrics.
    quiet = print_config(["--config", EXAMPLE_CONFIG, "--metrics", ""], {"CDCVIEW_GRPC": ""})
    assert quiet.returncode == 0, quiet.stderr
    assert yaml.safe_load(quiet.stdout)["server"] == {
        "grpc": "127.0.0.1:50051", "fast_reads": "", "metrics": "", "ready_max_lag_seconds": 60,
        **SERVER_DEFAULTS}


def test_config_path_from_the_environment_and_print_config_round_trips(binaries, tmp_path):
    first = print_config([], {"CDCVIEW_CONFIG": EXAMPLE_CONFIG}, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    printed = tmp_path / "printed.yaml"
    printed.write_text(first.stdout)
    again = print_config(["--config", str(printed)])
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    views = [v["name"] for v in yaml.safe_load(first.stdout)["tables"][0]["views"]]
    assert views == ["GSI1", "OpenOrders", "ByMember", "ByEntity", "ByLocation", "ByScore",
                     "VotesByDay"]


def test_invalid_override_is_an_error_naming_flag_and_variable(binaries):
    p = print_config(["--config", EXAMPLE_CONFIG], {"CDCVIEW_GRPC": "50051"})
    assert p.returncode == 2
    assert p.stderr == ("cdcviewd: server.grpc (--grpc or CDCVIEW_GRPC): expected host:port "
                        "like 127.0.0.1:50051, got \"50051\"\n")


def test_log_json_from_the_environment(binaries, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"storage": {"path": str(tmp_path / "s"), "map_size": "64MiB"},
                                  "server": {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0"},
                                  "tables": [{"name": "T", "key": {"partition": "PK"}}]}))
    log = tmp_path / "log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([DAEMON_BIN, "--config", str(config)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={"PATH": os.environ["PATH"], "CDCVIEW_LOG_JSON": "true"})
    try:
        wait_for("the serving line", lambda: "cdcviewd serving gRPC" in log.read_text())
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    lines = log.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert [sorted(r) for r in records] == [["level", "msg", "ts"]] * len(records)
    assert any(r["msg"].startswith("cdcviewd serving gRPC on port") for r in records)


def test_any_field_from_set_flags_and_environment_variables(binaries):
    env = {"CDCVIEW_STORAGE_MAP_SIZE": "1GiB", "CDCVIEW_STORAGE_MAX_MAP_SIZE": "8GiB",
           "CDCVIEW_STORAGE_FLUSH_INTERVAL_MS": "50", "CDCVIEW_SERVER_READY_MAX_LAG_SECONDS": "15", "CDCVIEW_APPLY_BATCH_SIZE": "256",
           "CDCVIEW_APPLY_MAX_DELAY_MS": "5", "CDCVIEW_APPLY_LOG_COUNTS_SECONDS": "0",
           "CDCVIEW_WATCH_RETAIN_CHANGES": "1000", "CDCVIEW_WATCH_MAX_LAG_CHANGES": "10"}
    p = print_config(["--config", EXAMPLE_CONFIG, "--set", "apply.batch_size=512",
                      "--set", "sources.sample.file.follow=true",
                      "--set", "storage.write_map=false"], env)
    assert p.returncode == 0, p.stderr
    got = yaml.safe_load(p.stdout)
    assert got["storage"] == {"path": "./data", "map_size": "1GiB", "max_map_size": "8GiB",
                              "write_map": False, "flush_interval_ms": 50,
                              "verify_at_start": "auto"}
    assert got["server"]["ready_max_lag_seconds"] == 15
    # --set wins over the variable.
    assert got["apply"] == {"batch_size": 512, "max_delay_ms": 5, "queue_capacity": 8192,
                            "log_counts_seconds": 0, "tombstone_compaction_step": 1000}
    assert got["watch"] == {"retain_changes": 1000, "max_lag_changes": 10,
                            "max_stream_buffer_bytes": "1MiB", "stalled_stream_timeout_ms": 10000,
                            "max_streams": 256}
    assert got["sources"][0]["file"]["follow"] is True


def test_every_variable_in_help_sets_its_field(binaries):
    """--help lists a variable per settable field; each one really reaches that field (an
    invalid value is rejected naming the variable and the field)."""
    listed = re.findall(r"^\s+(CDCVIEW_[A-Z_]+)\s+\((\S+)\)$", help_text(), re.M)
    assert len(listed) == 50, help_text()
    # The cluster block's fields are read together: the others are set validly around the one
    # tried, so the error is about it.
    cluster = {"CDCVIEW_CLUSTER_MEMBERS": "3", "CDCVIEW_CLUSTER_ORDINAL": "0",
               "CDCVIEW_CLUSTER_PEERS": "cdcview-{i}:50051"}
    for name, path in listed:
        assert name == "CDCVIEW_" + path.upper().replace(".", "_")
        env = dict(cluster, **{name: "[]"}) if name in cluster else {name: "[]"}
        p = print_config(["--config", EXAMPLE_CONFIG], env)
        assert p.returncode == 2, (name, p.stdout)
        assert p.stderr.startswith(f"cdcviewd: {name}: {path}: expected "), p.stderr


@pytest.mark.parametrize("args,env,message", [
    ([], {"CDCVIEW_APPLY_BATCH_SIZE": "0"},
     'CDCVIEW_APPLY_BATCH_SIZE: apply.batch_size: expected a whole number from 1 to 1048576, '
     'got "0"'),
    (["--set", "apply.bogus=1"], {},
     '--set apply.bogus=1: apply: unknown field "bogus" (expected one of batch_size, '
     'max_delay_ms, queue_capacity, log_counts_seconds, tombstone_compaction_step)'),
    (["--set", "sources.nope.file.follow=true"], {},
     '--set sources.nope.file.follow=true: no source named "nope" (sources: sample)'),
    (["--set", "apply"], {},
     '--set "apply": expected <field path>=<value>, like apply.batch_size=512'),
])
def test_a_bad_setting_names_where_it_came_from(binaries, args, env, message):
    p = print_config(["--config", EXAMPLE_CONFIG] + args, env)
    assert (p.returncode, p.stdout, p.stderr) == (2, "", f"cdcviewd: {message}\n")


def test_start_up_errors_are_json_lines_with_log_json(binaries, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("nope: 1\ntables: []\n")
    p = subprocess.run([DAEMON_BIN, "--config", str(bad), "--log-json"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2
    [line] = p.stderr.splitlines()
    record = json.loads(line)
    assert sorted(record) == ["level", "msg", "ts"]
    assert record["level"] == "error"
    assert record["msg"] == (f'cdcviewd: {bad}:1: unknown field "nope" (expected one of storage, '
                             'server, apply, watch, cluster, sources, tables)')
    # A failure after the config: the store cannot be opened (its path is a file).
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = subprocess.run([DAEMON_BIN, "--config", EXAMPLE_CONFIG, "--storage-path", str(blocker),
                        "--log-json"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    records = [json.loads(line) for line in p.stderr.splitlines()]
    assert records[-1]["level"] == "error"
    assert records[-1]["msg"].startswith("cdcviewd: opening the store: "), records


def test_event_counts_at_info_level_never_a_line_per_event(binaries, tmp_path):
    bad = tmp_path / "bad.ndjson"
    bad.write_text("not json\n" * 50)
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({
        "storage": {"path": str(tmp_path / "s"), "map_size": "64MiB"},
        "server": {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0"},
        "sources": [{"name": "sample", "table": "App", "file": {"path": SAMPLE}},
                    {"name": "bad", "table": "App", "file": {"path": str(bad)}}],
        "tables": load_yaml(EXAMPLE_CONFIG)["tables"]}))
    log = tmp_path / "log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([DAEMON_BIN, "--config", str(config), "--log-json",
                                 "--set", "apply.log_counts_seconds=1"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        def counted():
            msgs = [json.loads(line)["msg"] for line in log.read_text().splitlines()]
            return (any(m.startswith("source sample (finished)") and "totals 3134 applied" in m
                        for m in msgs)
                    and any(m.startswith("source bad (finished)") and "50 rejected; " in m
                            for m in msgs))
        wait_for("both count lines", counted, describe=lambda: log.read_text()[-2000:])
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    counts = [r for r in records if r["msg"].startswith("source ") and " applied, " in r["msg"]]
    assert {r["level"] for r in counts} == {"info"}
    last = {r["msg"].split(" ")[1]: r["msg"] for r in counts}
    assert re.fullmatch(r"source sample \(finished\): \+\d+ applied, \+0 skipped, \+0 rejected in "
                        r"the last \d+ s; totals 3134 applied, 0 skipped, 0 rejected; lag "
                        r"\d+\.\d s", last["sample"]), last
    assert re.fullmatch(r"source bad \(finished\): \+\d+ applied, \+0 skipped, \+\d+ rejected in "
                        r"the last \d+ s; totals 0 applied, 0 skipped, 50 rejected; lag 0\.0 s",
                        last["bad"]), last
    # 50 rejected records: 5 warnings, not 50 (the rest are summed up after 10 s).
    rejected = [r for r in records if r["msg"].startswith("source bad: rejected ")]
    assert len(rejected) == 5, rejected
    assert len(records) < 40, [r["msg"] for r in records]
