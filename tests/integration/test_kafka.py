"""cdcviewd's Kafka source against a real Apache Kafka broker (scripts/kafka.sh).

The same synthetic change events (tests/integration/streams.py, no replays) go to three
6-partition topics, one per format (dynamodb-json, debezium-json, protobuf), each item's
changes to one partition; the views built from them must equal, entry for entry, the views the
file source builds from the same events. Then: kill -9 at random moments, poison messages and
the dead-letter topic. (Two daemons of one group, and cluster members: test_kafka_cluster.py.)

CDCVIEW_KAFKA_EVENTS sets the number of events per format (default 100000).
"""

import importlib
import json
import os
import random
import time

import pytest

import reference as ref
import streams
from conftest import Daemon, dashboard_metric_names, expected_position, metric, wait_for
from kafka_fixture import PARTITIONS, kafka, partition_of  # noqa: F401 (fixture)

EVENTS = int(os.environ.get("CDCVIEW_KAFKA_EVENTS", "100000"))
VIEWS = ref.EXAMPLE_VIEWS
FORMATS = ("dynamodb-json", "debezium-json", "protobuf")
LONG_WAIT = 240.0  # seconds; ingesting 100k events on a loaded 2-core machine
# Fast group protocol for tests (the broker's group.min.session.timeout.ms is 6 s).
GROUP_PROPS = {"heartbeat.interval.ms": "300", "session.timeout.ms": "6000"}


# ---------------------------------------------------------------- events in three formats

def item_key(record):
    keys = record["dynamodb"]["Keys"]
    return keys["PK"]["S"], keys["SK"]["S"]


def json_image(image):
    """A DynamoDB image (S and N only, as streams.py makes them) as Debezium's row JSON.
    Numbers keep their exact text ("12E3" stays 12E3)."""
    parts = []
    for name, value in image.items():
        (kind, body), = value.items()
        assert kind in ("S", "N"), f"no Debezium column type for {kind}"
        parts.append(json.dumps(name) + ":" + (body if kind == "N" else json.dumps(body)))
    return "{" + ",".join(parts) + "}"


def to_debezium(record, n):
    """(key, value) messages of one record: Debezium's envelope, every 7th schema-wrapped,
    every 10th insert a snapshot read ("r"), a tombstone after each delete."""
    d = record["dynamodb"]
    pk, sk = item_key(record)
    key = json.dumps({"PK": pk, "SK": sk}).encode()
    op = {"INSERT": "c", "MODIFY": "u", "REMOVE": "d"}[record["eventName"]]
    if op == "c" and n % 10 == 0:
        op = "r"
    before = json_image(d["OldImage"]) if "OldImage" in d else "null"
    after = json_image(d["NewImage"]) if "NewImage" in d else "null"
    ms = int(d["ApproximateCreationDateTime"]) * 1000
    envelope = (f'{{"before":{before},"after":{after},"source":{{"connector":"test",'
                f'"ts_ms":{ms}}},"op":"{op}","ts_ms":{ms + 5}}}')
    if n % 7 == 0:
        envelope = f'{{"schema":{{"type":"struct","optional":false}},"payload":{envelope}}}'
    out = [(key, envelope.encode())]
    if op == "d":
        out.append((key, None))
    return out


class Protobuf:
    def __init__(self, pb):
        self.m = importlib.import_module("cdcview.v1.change_event_pb2")

    @staticmethod
    def _fill(item, image):
        for name, value in image.items():
            (kind, body), = value.items()
            if kind == "S":
                item.attributes[name].s = body
            else:
                item.attributes[name].n = body

    def encode(self, record):
        d = record["dynamodb"]
        e = self.m.ChangeEvent()
        e.kind = getattr(self.m.ChangeEvent, record["eventName"])
        self._fill(e.keys, d["Keys"])
        if "NewImage" in d:
            self._fill(e.new_image, d["NewImage"])
        if "OldImage" in d:
            self._fill(e.old_image, d["OldImage"])
        e.sequence_number = d["SequenceNumber"]
        e.creation_time_ms = int(d["ApproximateCreationDateTime"]) * 1000
        return e.SerializeToString()


def messages(records, fmt, pb):
    """(partition, key, value) for every record in `fmt`."""
    proto = Protobuf(pb) if fmt == "protobuf" else None
    out = []
    for n, r in enumerate(records):
        pk, sk = item_key(r)
        partition = partition_of(f"{pk}\x00{sk}")
        if fmt == "dynamodb-json":
            out.append((partition, f"{pk}|{sk}".encode(), json.dumps(r).encode()))
        elif fmt == "protobuf":
            out.append((partition, f"{pk}|{sk}".encode(), proto.encode(r)))
        else:
            out.extend((partition, k, v) for k, v in to_debezium(r, n))
    return out


def table_for(fmt):
    """The example table, renamed per format so three tables live in one store."""
    suffix = fmt.split("-")[0]
    table = json.loads(json.dumps(ref.EXAMPLE_TABLE))
    table["name"] = f"App_{suffix}"
    for v in table["views"]:
        v["name"] = f"{v['name']}_{suffix}"
    for a in table.get("aggregates", []):  # names are store-wide, like view names
        a["name"] = f"{a['name']}_{suffix}"
    return table


def kafka_source(kafka, fmt, topic, group, name=None, **extra):
    source = {"brokers": kafka.bootstrap, "topics": [topic], "group": group, "format": fmt,
              "properties": dict(GROUP_PROPS, **extra.pop("properties", {}))}
    source.update(extra)
    return {"name": name or fmt.split("-")[0], "table": table_for(fmt)["name"], "kafka": source}


def kafka_config(sources, tables):
    return {"sources": sources, "tables": tables,
            "apply": {"batch_size": 2000, "max_delay_ms": 5}}


def renamed(scans, fmt):
    suffix = fmt.split("-")[0]
    return {f"{v}_{suffix}": entries for v, entries in scans.items()}


def wait_caught_up(d, source, want, timeout=LONG_WAIT):
    """Until `source` stored exactly the positions `want` ({"topic/p": next offset})."""
    def done():
        s = d.source(source)
        got = {p.partition: p.position for p in s.positions}
        return got == want

    def describe():
        s = d.source(source)
        return (f"state {s.state} {s.error!r}, applied {s.events_applied}, positions "
                f"{sorted((p.partition, p.position) for p in s.positions)}, want {sorted(want.items())}")

    wait_for(f"source {source} to apply everything", done, timeout=timeout, interval=0.1,
             describe=describe)


def expected_positions(kafka, topic):
    return {p: str(hw) for p, hw in kafka.high_watermarks(topic).items() if hw > 0}


# ---------------------------------------------------------------- module fixtures

@pytest.fixture(scope="module")
def events():
    return streams.generate(EVENTS, seed=3, replay_every=10**9)


@pytest.fixture(scope="module")
def reference_scans(events, tmp_path_factory, pb, binaries):
    """The views the file source builds from the same events (Scans of a real cdcviewd)."""
    work = tmp_path_factory.mktemp("file-reference")
    path = work / "events.ndjson"
    streams.write(path, events)
    d = Daemon(work, config={"sources": [{"name": "file", "table": "App",
                                          "file": {"path": str(path)}}],
                             "tables": [ref.EXAMPLE_TABLE],
                             "storage": {"path": str(work / "store"), "map_size": "256MiB"}},
               stubs=pb)
    try:
        d.start()
        d.wait_finished("file", str(path))
        assert d.positions("file") == {"": expected_position(str(path))}
        scans = d.scan_all(VIEWS)
        d.stop()
    finally:
        d.discard()
    assert sum(len(e) for e in scans.values()) > 0
    return scans


@pytest.fixture(scope="module")
def topics(kafka, events, pb):
    """One topic per format, filled with the events."""
    out = {}
    for fmt in FORMATS:
        topic = kafka.topic(fmt.split("-")[0])
        kafka.produce(topic, messages(events, fmt, pb))
        out[fmt] = topic
    return out


# ---------------------------------------------------------------- tests

def test_three_formats_build_the_views_the_file_source_builds(kafka, topics, reference_scans,
                                                             daemon_factory, events):
    sources = [kafka_source(kafka, fmt, topics[fmt], f"all-{topics[fmt]}") for fmt in FORMATS]
    d = daemon_factory(kafka_config(sources, [table_for(f) for f in FORMATS]))
    d.start()
    for fmt in FORMATS:
        name = fmt.split("-")[0]
        wait_caught_up(d, name, expected_positions(kafka, topics[fmt]))
    removes = sum(1 for r in events if r["eventName"] == "REMOVE")
    m = d.metrics()
    for fmt in FORMATS:
        name = fmt.split("-")[0]
        views = [f"{v}_{name}" for v in VIEWS]
        assert d.scan_all(views) == renamed(reference_scans, fmt), f"{fmt} views differ"
        assert metric(m, "cdcview_events_total", source=name, result="applied") == len(events)
        # Debezium's tombstones (one per delete) advance the position and apply nothing.
        skipped = removes if fmt == "debezium-json" else 0
        assert metric(m, "cdcview_events_total", source=name, result="skipped") == skipped
        assert metric(m, "cdcview_events_total", source=name, result="rejected") == 0
        assert metric(m, "cdcview_kafka_rebalances_total", source=name) >= 1
        s = d.source(name)
        assert s.state in ("running", "caught_up"), s.error

    def lag_is_zero():
        m = d.metrics()
        return all(metric(m, "cdcview_kafka_consumer_lag_messages", source=fmt.split("-")[0],
                          topic=topics[fmt], partition=str(p)) == 0
                   for fmt in FORMATS for p in range(PARTITIONS))
    wait_for("consumer lag 0 on every partition", lag_is_zero, timeout=30)
    # Every Kafka metric a dashboard panel or alert names is in the real output.
    exported = {name for name, _ in d.metrics()}
    kafka_metrics = dashboard_metric_names("cdcview_kafka_")
    assert kafka_metrics == ["cdcview_kafka_consumer_lag_messages", "cdcview_kafka_rebalances_total"]
    assert [n for n in kafka_metrics if n not in exported] == []
    for fmt in FORMATS:  # the group's committed offsets follow the store (informational)
        group = f"all-{topics[fmt]}"
        want = expected_positions(kafka, topics[fmt])
        wait_for(f"group {group} to commit the applied offsets",
                 lambda: committed(kafka, group, topics[fmt]) == want, timeout=30)
    d.stop()


def committed(kafka, group, topic):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
    try:
        offsets = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {f"{topic}/{tp.partition}": str(tp.offset) for tp in offsets if tp.offset >= 0}
    finally:
        c.close()


@pytest.mark.parametrize("fmt", ["protobuf", "debezium-json"])
def test_kill_9_during_ingestion_leaves_exact_views(kafka, topics, reference_scans,
                                                   daemon_factory, fmt):
    rng = random.Random(fmt)
    topic = topics[fmt]
    name = fmt.split("-")[0]
    # Static membership: a restarted cdcviewd takes its partitions back at once instead of
    # waiting for the killed member's session to time out.
    source = kafka_source(kafka, fmt, topic, f"kill-{topic}",
                          properties={"group.instance.id": f"kill-{topic}"})
    d = daemon_factory(kafka_config([source], [table_for(fmt)]), name=f"kill-{name}")
    want = expected_positions(kafka, topic)
    total = sum(int(v) for v in want.values())

    def applied():
        return sum(int(v) for v in d.positions(name).values())

    # Ten kill points spread over the ingestion, each at a random place in its stretch.
    points = [total * i // 12 + rng.randrange(max(1, total // 12)) for i in range(1, 11)]
    kills = 0
    d.start()
    for point in points:
        wait_for(f"{name} to pass offset sum {point}", lambda: applied() >= point,
                 timeout=LONG_WAIT, interval=0.01,
                 describe=lambda: f"applied {applied()} of {total}: {d.log()[-1500:]}")
        d.kill()
        kills += 1
        d.start()
    assert kills >= 10
    wait_caught_up(d, name, want)
    views = [f"{v}_{name}" for v in VIEWS]
    assert d.scan_all(views) == renamed(reference_scans, fmt)
    assert d.positions(name) == want
    d.stop()


def user(n):
    pk = f"USER#poison{n}"
    email = f"poison{n}@example.com"
    image = {"PK": {"S": pk}, "SK": {"S": "PROFILE"}, "type": {"S": "user"},
             "email": {"S": email}, "GSI1PK": {"S": f"EMAIL#{email}"}, "GSI1SK": {"S": pk}}
    return {"eventName": "INSERT", "dynamodb": {"Keys": {"PK": image["PK"], "SK": image["SK"]},
                                                "NewImage": image, "SequenceNumber": str(n)}}


def test_poison_messages_go_to_the_dead_letter_topic(kafka, daemon_factory):
    ddb_topic, dbz_topic = kafka.topic("poison", 1), kafka.topic("poison-dbz", 1)
    dlq = kafka.topic("dlq", 1)
    good = json.dumps(user(1))
    wrong_key = json.loads(json.dumps(user(9)))
    wrong_key["dynamodb"]["Keys"]["PK"] = {"N": "5"}
    wrong_key["dynamodb"]["NewImage"]["PK"] = {"N": "5"}
    unknown_op = dict(user(8), eventName="UPSERT")
    ddb = [(b"k0", good.encode()),
           (b"k1", good[:len(good) // 2].encode()),               # truncated JSON
           (b"k2", json.dumps(user(2)).encode()),
           (b"k3", json.dumps(wrong_key).encode()),               # PK is N, the table says S
           (b"k4", json.dumps(unknown_op).encode()),              # unknown eventName
           (b"k5", b""),                                          # empty value
           (b"k6", json.dumps(user(3)).encode())]
    kafka.produce(ddb_topic, [(0, k, v) for k, v in ddb])
    dbz = [(b'{"PK":"USER#poison4","SK":"PROFILE"}',
            b'{"op":"c","after":{"PK":"USER#poison4","SK":"PROFILE","type":"user"}}'),
           (b'{"PK":"USER#poison5","SK":"PROFILE"}', b'{"op":"x","after":{}}')]  # unknown op
    kafka.produce(dbz_topic, [(0, k, v) for k, v in dbz])

    sources = [kafka_source(kafka, "dynamodb-json", ddb_topic, f"p-{ddb_topic}",
                            dead_letter_topic=dlq),
               kafka_source(kafka, "debezium-json", dbz_topic, f"p-{dbz_topic}",
                            dead_letter_topic=dlq)]
    tables = [table_for("dynamodb-json"), table_for("debezium-json")]
    d = daemon_factory(kafka_config(sources, tables))
    d.start()
    wait_caught_up(d, "dynamodb", {f"{ddb_topic}/0": "7"}, timeout=60)
    wait_caught_up(d, "debezium", {f"{dbz_topic}/0": "2"}, timeout=60)
    m = d.metrics()
    assert metric(m, "cdcview_events_total", source="dynamodb", result="applied") == 3
    assert metric(m, "cdcview_events_total", source="dynamodb", result="rejected") == 4
    assert metric(m, "cdcview_events_total", source="debezium", result="applied") == 1
    assert metric(m, "cdcview_events_total", source="debezium", result="rejected") == 1
    for reason, count in (("malformed_json", 2), ("bad_key", 1), ("bad_record", 1)):
        assert metric(m, "cdcview_rejected_events_total", source="dynamodb",
                      reason=reason) == count
    gsi = d.scan_all(["GSI1_dynamodb"])["GSI1_dynamodb"]
    assert [e[2]["PK"]["S"] for e in gsi] == ["USER#poison1", "USER#poison2", "USER#poison3"]

    letters = kafka.read_all(dlq)
    got = [(dict((k, v.decode()) for k, v in (m.headers() or [])), m.key(), m.value() or b"")
           for m in letters]
    assert len(got) == 5, got
    by_origin = {(h["cdcview.source.topic"], h["cdcview.source.offset"]): (h, k, v)
                 for h, k, v in got}
    expect = {(ddb_topic, "1"): ("malformed JSON: ", ddb[1]),
              (ddb_topic, "3"): ("key attribute PK must be S, got N", ddb[3]),
              (ddb_topic, "4"): ('eventName: expected INSERT, MODIFY or REMOVE, got "UPSERT"',
                                 ddb[4]),
              (ddb_topic, "5"): ("malformed JSON: ", ddb[5]),
              (dbz_topic, "1"): ('op: expected "c", "u", "d" or "r", got "x"', dbz[1])}
    assert set(by_origin) == set(expect)
    for origin, (text, (key, value)) in expect.items():
        headers, got_key, got_value = by_origin[origin]
        assert headers["cdcview.source.partition"] == "0"
        locator = f"{origin[0]}/0@{origin[1]}: "
        assert headers["cdcview.reason"].startswith(locator), headers
        assert text in headers["cdcview.reason"], headers
        assert (got_key, got_value) == (key, value)
    d.stop()
