"""The Kafka Streams peer (tests/bench/peers/kafka-streams) answers what cdcviewd answers.

One topic of synthetic change events (kafka_bench's generator and message layout: DynamoDB
Streams JSON, each item's changes in one of 6 partitions; inserts, updates, removes and replayed
events), consumed by cdcviewd (a Kafka source, the views and aggregates of examples/cdcview.yaml)
and by the peer. Once both have caught up, every view's full contents (cdcview: Scan; the peer:
its dump of the RocksDB store through IQv2) and every aggregate group with its shards
(ListAggregates; the peer's aggregates endpoint) must be equal, entry for entry and in order;
so must the point and 100-row range queries the comparison bench times. That makes
kafka_streams_compare.py a comparison of equal work.

Skipped, with the reason, only when the peer cannot be built for want of Maven, Java or the
artifacts from Maven Central (a compile error fails). CDCVIEW_PEER_EVENTS sets the number of
events (default 4000).
"""

import json
import os

import pytest
import yaml

import kafka_streams_peer
import streams
from conftest import EXAMPLE_CONFIG, entry_to_tuple, to_typed, wait_for
from kafka_fixture import kafka, partition_of  # noqa: F401 (fixture)

EVENTS = int(os.environ.get("CDCVIEW_PEER_EVENTS", "4000"))
GROUP_PROPS = {"heartbeat.interval.ms": "300", "session.timeout.ms": "6000"}


def example_table():
    with open(EXAMPLE_CONFIG, encoding="utf-8") as f:
        tables = yaml.safe_load(f)["tables"]
    assert [t["name"] for t in tables] == ["App"]
    return tables[0]


@pytest.fixture(scope="module")
def peer_build():
    try:
        kafka_streams_peer.build()
    except kafka_streams_peer.BuildUnavailable as e:
        pytest.skip(f"the Kafka Streams peer cannot be built here: {e}")


def ddb_messages(records):
    """kafka_bench.ddb_messages: key PK \\0 SK, partition by CRC-32 of the key."""
    out = []
    for r in records:
        keys = r["dynamodb"]["Keys"]
        key = f"{keys['PK']['S']}\x00{keys['SK']['S']}"
        out.append((partition_of(key), key.encode(), json.dumps(r).encode()))
    return out


def measures(ms):
    return {m.name: (m.value.n if m.HasField("value") else None) for m in ms}


def cdcview_groups(d, pb, name):
    """Every group of aggregate `name` as the peer prints them: [group, members, measures,
    [[physical, members, measures], ...]]."""
    req = pb.vs.ListAggregatesRequest(aggregate=name, limit=100)
    out = []
    while True:
        r = d.stub.ListAggregates(req, timeout=30)
        out.extend([to_typed(g.group), g.members, measures(g.measures),
                    [[s.group.s, s.members, measures(s.measures)] for s in g.shards]]
                   for g in r.groups)
        if not r.next_page_token:
            return out
        req.page_token = r.next_page_token


def as_lists(entries):
    return [[pk, sk, item] for pk, sk, item in entries]


def test_peer_views_and_aggregates_equal_cdcviews(kafka, daemon_factory, pb, peer_build,
                                                  tmp_path):
    table = example_table()
    views = [v["name"] for v in table["views"]]
    aggregates = [a["name"] for a in table["aggregates"]]
    records = streams.generate(EVENTS, seed=23)  # replays every ~40 records, skipped by both
    assert {r["eventName"] for r in records} == {"INSERT", "MODIFY", "REMOVE"}
    topic = kafka.topic("peer-check")
    kafka.produce(topic, ddb_messages(records))
    want = {p: str(hw) for p, hw in kafka.high_watermarks(topic).items() if hw > 0}

    d = daemon_factory({"sources": [{"name": "k", "table": "App", "kafka": {
        "brokers": kafka.bootstrap, "topics": [topic], "group": f"cdcview-{topic}",
        "properties": GROUP_PROPS}}], "tables": [table]})
    d.start()
    peer = kafka_streams_peer.Peer(kafka.bootstrap, [topic], str(tmp_path / "peer-state"),
                                   str(tmp_path / "peer.log"), f"peer-{topic}")
    try:
        peer.wait_serving()
        wait_for(f"cdcviewd to apply {topic}", lambda: d.positions("k") == want, timeout=180,
                 describe=lambda: f"positions {d.positions('k')}, want {want}")
        peer.wait_caught_up(timeout=300, input_records=len(records))
        progress = peer.progress()
        assert progress["rejected"] == 0, progress
        assert progress["input_positions"] == {p: int(o) for p, o in want.items()}

        for view in views:
            ours = as_lists(entry_to_tuple(e) for e in d.scan(view)[0])
            theirs = peer.dump(view)
            assert ours, f"view {view} is empty: the workload should fill every view"
            assert theirs == ours, (
                f"view {view}: the peer has {len(theirs)} entries, cdcview {len(ours)}; first "
                f"difference: " + next((f"peer {a} / cdcview {b}" for a, b in zip(theirs, ours)
                                        if a != b), "(one is a prefix of the other)"))
            # The queries the comparison bench times: the first partition key's first 100
            # entries, and its first entry by its whole key.
            pk, sk, item = ours[0]
            page = d.stub.Query(pb.vs.QueryRequest(view=view, partition_key=pb.av.AttributeValue(
                **{k.lower(): v for k, v in pk.items()}), limit=100), timeout=30)
            assert peer.get("/range", view=view, pk=json_text(pk), limit=100)["entries"] == \
                as_lists(entry_to_tuple(e) for e in page.entries), view
            point = {"view": view, "pk": json_text(pk), "tpk": json_text(item["PK"]),
                     "tsk": json_text(item["SK"])}
            if sk is not None:
                point["sk"] = json_text(sk)
            assert peer.get("/point", **point)["entries"] == [[pk, sk, item]], view

        for name in aggregates:
            ours, theirs = cdcview_groups(d, pb, name), peer.aggregate(name)
            assert ours, f"aggregate {name} has no group"
            assert theirs == ours, f"aggregate {name}: peer {theirs} / cdcview {ours}"
        peer.stop()
        assert peer.proc.returncode in (0, 143), peer.log()[-3000:]
    finally:
        peer.ensure_dead()
    d.stop()


def json_text(value):
    return json.dumps(value)


def test_sharded_range_reads_every_shard(kafka, peer_build, tmp_path):
    """A write-sharded view's logical key (DAY#<day>) reads its four physical partitions
    (DAY#<day>#0..3) merged in sort-key order, as cdcview's Query does."""
    topic = kafka.topic("peer-shards")
    records = []
    seq = 10**20
    for i, shard in enumerate([3, 0, 2, 1, 0, 3]):
        seq += 1
        pk, sk = f"VOTE#v{i}", "2025-03-01"
        image = {"PK": {"S": pk}, "SK": {"S": sk}, "type": {"S": "vote"},
                 "GSI1PK": {"S": f"DAY#2025-03-01#{shard}"}, "GSI1SK": {"S": f"u{9 - i}"}}
        records.append({"eventName": "INSERT", "dynamodb": {
            "Keys": {"PK": {"S": pk}, "SK": {"S": sk}}, "SequenceNumber": str(seq),
            "NewImage": image}})
    kafka.produce(topic, ddb_messages(records))
    peer = kafka_streams_peer.Peer(kafka.bootstrap, [topic], str(tmp_path / "state"),
                                   str(tmp_path / "peer.log"), f"peer-{topic}")
    try:
        peer.wait_serving()
        peer.wait_caught_up(timeout=300, input_records=len(records))
        got = peer.get("/range", view="VotesByDay", pk=json_text({"S": "DAY#2025-03-01"}),
                       limit=4)["entries"]
        assert [(e[0]["S"], e[1]["S"]) for e in got] == [
            ("DAY#2025-03-01#3", "u4"), ("DAY#2025-03-01#0", "u5"), ("DAY#2025-03-01#1", "u6"),
            ("DAY#2025-03-01#2", "u7")]
        one = peer.get("/range", view="VotesByDay", pk=json_text({"S": "DAY#2025-03-01#3"}),
                       limit=100)["entries"]
        assert [e[1]["S"] for e in one] == ["u4", "u9"]
        groups = peer.aggregate("VotesPerDay")
        assert groups == [[{"S": "DAY#2025-03-01"}, 6, {"count": "6"}, [
            ["DAY#2025-03-01#0", 2, {"count": "2"}], ["DAY#2025-03-01#1", 1, {"count": "1"}],
            ["DAY#2025-03-01#2", 1, {"count": "1"}], ["DAY#2025-03-01#3", 2, {"count": "2"}]]]]
    finally:
        peer.ensure_dead()

