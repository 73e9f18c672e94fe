"""Static partition assignment against a real Apache Kafka broker (scripts/kafka.sh).

Two standalone daemons given one consumer group each read every partition and serve whole
views; three members of a cluster (`cluster:`) each read exactly their partitions (p % 3), and
together hold what one standalone daemon holds; a partition added to the topic is read by its
owner; a member checks its topics keep their full history; the config errors of a cluster
through the real binary.
"""
import json
import socket
import subprocess
import time

from confluent_kafka.admin import NewPartitions, NewTopic

import reference as ref
import streams
from conftest import DAEMON_BIN, metric, wait_for
from kafka_fixture import kafka  # noqa: F401 (fixture)
from test_kafka import kafka_config, kafka_source, messages, renamed, table_for

FMT = "dynamodb-json"
SOURCE = "dynamodb"
VIEWS = [f"{v}_dynamodb" for v in ref.EXAMPLE_VIEWS]
LOCAL_ONLY = (("x-cdcview-local-only", "1"),)
WAIT = 120.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def on_partitions(msgs, partitions):
    """The messages moved to `partitions` partitions: an item's changes stay in one."""
    return [(p % partitions, k, v) for p, k, v in msgs]


def high_watermarks(kafka, topic, partitions):
    return {p: str(hw) for p, hw in kafka.high_watermarks(topic, partitions).items() if hw > 0}


def model_scans(records):
    model = ref.build(ref.EXAMPLE_TABLE, list(enumerate(records, start=1)))
    return renamed({v: [(e.pk, e.sk, e.item) for e in model.scan(v)] for v in ref.EXAMPLE_VIEWS},
                   FMT)


def local_status(d):
    return d.stub.GetStatus(d.stubs.vs.GetStatusRequest(), timeout=10, metadata=LOCAL_ONLY)


def local_source(d):
    [s] = [s for s in local_status(d).sources if s.name == SOURCE]
    return s


def local_positions(d):
    return {p.partition: p.position for p in local_source(d).positions}


def local_scan(d, view):
    """Every entry of `view` in this member's own store, as canonical JSON text."""
    from conftest import entry_to_tuple
    out, token = [], b""
    while True:
        r = d.stub.Scan(d.stubs.vs.ScanRequest(view=view, limit=500, page_token=token),
                        timeout=30, metadata=LOCAL_ONLY)
        out.extend(json.dumps(entry_to_tuple(e), sort_keys=True) for e in r.entries)
        token = r.next_page_token
        if not token:
            return out


def wait_positions(d, want, timeout=WAIT):
    def describe():
        s = local_source(d)
        return (f"state {s.state} {s.error!r}, positions "
                f"{sorted((p.partition, p.position) for p in s.positions)}, want {sorted(want.items())}")
    wait_for("the member to apply its partitions", lambda: local_positions(d) == want,
             timeout=timeout, interval=0.1, describe=describe)


def test_two_standalone_daemons_in_one_group_both_serve_whole_views(kafka, daemon_factory, pb):
    records = streams.generate(3000, seed=21, replay_every=10**9)
    topic = kafka.topic("twins", partitions=3)
    group = f"twins-{topic}"
    config = kafka_config([kafka_source(kafka, FMT, topic, group)], [table_for(FMT)])
    a = daemon_factory(config, name="a").start()
    b = daemon_factory(config, name="b").start()
    kafka.produce(topic, on_partitions(messages(records, FMT, pb), 3))
    want = high_watermarks(kafka, topic, 3)
    scans = model_scans(records)
    for d in (a, b):
        wait_positions(d, want)
        assert d.scan_all(VIEWS) == scans
        s = d.source(SOURCE)
        assert list(s.partitions) == [f"{topic}/0", f"{topic}/1", f"{topic}/2"]
        wait_for("caught_up", lambda: d.source(SOURCE).state == "caught_up")
        m = d.metrics()
        assert metric(m, "cdcview_cluster_partitions_owned", source=SOURCE) == 3
        assert metric(m, "cdcview_events_total", source=SOURCE, result="applied") == len(records)
    # The group still gets the applied offsets, for lag tools (both daemons commit the same).
    from confluent_kafka import Consumer, TopicPartition

    def committed():
        c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
        try:
            offsets = c.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
            return {f"{topic}/{tp.partition}": str(tp.offset) for tp in offsets if tp.offset >= 0}
        finally:
            c.close()
    wait_for(f"group {group} to hold the applied offsets", lambda: committed() == want,
             timeout=30, describe=lambda: str(committed()))
    a.stop()
    b.stop()


def test_three_members_each_read_their_share_and_pick_up_new_partitions(kafka, daemon_factory,
                                                                        pb):
    records = streams.generate(4000, seed=23, replay_every=10**9)
    topic = kafka.topic("members", partitions=6)
    group = f"members-{topic}"
    sources = [kafka_source(kafka, FMT, topic, group)]
    kafka.produce(topic, messages(records, FMT, pb))
    want = high_watermarks(kafka, topic, 6)

    standalone = daemon_factory(kafka_config([kafka_source(kafka, FMT, topic, f"alone-{group}")],
                                             [table_for(FMT)]), name="standalone").start()
    ports = [free_port() for _ in range(3)]
    peers = [f"127.0.0.1:{p}" for p in ports]
    members = []
    for ordinal in range(3):
        config = dict(kafka_config(sources, [table_for(FMT)]),
                      cluster={"members": 3, "ordinal": f"cdcview-{ordinal}", "peers": peers})
        d = daemon_factory(config, name=f"member{ordinal}")
        d.write_config(dict(config, storage={"path": d.store, "map_size": "64MiB"},
                            server={"grpc": peers[ordinal], "metrics": "127.0.0.1:0"}))
        members.append(d.start())

    wait_positions(standalone, want)
    for ordinal, d in enumerate(members):
        mine = {p: v for p, v in want.items() if int(p.split("/")[1]) % 3 == ordinal}
        wait_positions(d, mine)
        s = local_source(d)
        assert list(s.partitions) == [f"{topic}/{p}" for p in range(6) if p % 3 == ordinal]
        wait_for("caught_up", lambda: local_source(d).state == "caught_up",
                 describe=lambda: local_source(d).state)
        m = d.metrics()
        assert metric(m, "cdcview_cluster_partitions_owned", source=SOURCE) == 2
        # The fixture's topics keep 7 days (Kafka's default): not enough to resize.
        assert metric(m, "cdcview_cluster_topic_history_incomplete", source=SOURCE,
                      topic=topic) == 1
        assert f"topic {topic} does not keep its full history (cleanup.policy=delete" in d.log()
    for view in VIEWS:
        union = sorted(e for d in members for e in local_scan(d, view))
        assert union == sorted(local_scan(standalone, view)), view
    assert standalone.scan_all(VIEWS) == model_scans(records)

    # A seventh partition belongs to member 6 % 3 = 0, which reads it within a metadata read.
    kafka.admin.create_partitions([NewPartitions(topic, 7)])[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while len(kafka.admin.list_topics(topic, timeout=10).topics[topic].partitions) < 7:
        assert time.monotonic() < deadline, "the broker did not add the partition"
        time.sleep(0.1)
    added = messages(streams.generate(20, seed=29, replay_every=10**9), FMT, pb)
    kafka.produce(topic, [(6, k, v) for _, k, v in added])
    new = f"{topic}/6"
    wait_for(f"member 0 to apply {new}", lambda: local_positions(members[0]).get(new) == "20",
             timeout=60, describe=lambda: str(local_source(members[0])))
    assert new in local_source(members[0]).partitions
    for d in members[1:]:
        assert new not in local_source(d).partitions
        assert new not in local_positions(d)
    for d in members + [standalone]:
        d.stop()


def test_a_member_says_which_topics_keep_their_history(kafka, daemon_factory):
    kept = {}
    for name, config in (("compacted", {"cleanup.policy": "compact"}),
                         ("forever", {"retention.ms": "-1", "retention.bytes": "-1"})):
        topic = f"{name}-{time.monotonic_ns()}"
        kafka.admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1,
                                            config=config)])[topic].result(timeout=30)
        kept[name] = topic
    deleting = kafka.topic("deleting", partitions=1)
    source = kafka_source(kafka, FMT, kept["compacted"], f"g-{deleting}")
    source["kafka"]["topics"] = [kept["compacted"], kept["forever"], deleting]
    config = dict(kafka_config([source], [table_for(FMT)]),
                  cluster={"members": 1, "ordinal": 0, "peers": ["127.0.0.1:1"]})
    d = daemon_factory(config).start()

    def flags():
        m = d.metrics()
        name = "cdcview_cluster_topic_history_incomplete"
        return {t: m.get((name, frozenset({"source": SOURCE, "topic": t}.items())))
                for t in (kept["compacted"], kept["forever"], deleting)}
    want = {kept["compacted"]: 0, kept["forever"]: 0, deleting: 1}
    wait_for("every topic checked", lambda: flags() == want, timeout=60,
             describe=lambda: str(flags()))
    assert (f"source {SOURCE}: topic {deleting} does not keep its full history "
            "(cleanup.policy=delete, retention.ms=604800000, retention.bytes=-1): a member that "
            "gains partitions when the cluster is resized reads them from the oldest message "
            "still kept, and its views miss what was deleted; set cleanup.policy=compact on "
            "the topic, or retention.ms=-1 and retention.bytes=-1") in d.log()
    assert f"topic {kept['compacted']} does not keep" not in d.log()
    d.stop()


def run_with(tmp_path, extra, args=()):
    config = {"storage": {"path": str(tmp_path / "store")},
              "cluster": {"members": 3, "ordinal": 0, "peers": "cdcview-{i}.members:50051"},
              "tables": [table_for(FMT)]}
    config.update(extra)
    path = tmp_path / "cluster.yaml"
    path.write_text(json.dumps(config, indent=1))
    return subprocess.run([DAEMON_BIN, "--config", str(path)] + list(args), capture_output=True,
                          text=True, timeout=30), str(path)


def test_cluster_config_errors_through_the_binary(binaries, tmp_path):
    table = table_for(FMT)["name"]
    p, path = run_with(tmp_path, {"sources": [{"name": "f", "table": table,
                                               "file": {"path": "in.ndjson"}}]})
    assert (p.returncode, p.stdout) == (2, "")
    with open(path) as f:
        line = next(n for n, text in enumerate(f, start=1) if '"file":' in text)
    assert p.stderr == (
        f"cdcviewd: {path}:{line}: sources[0].file: a file source cannot be split between the "
        "members of a cluster: a file has one reader, which would hold every item; run "
        "standalone replicas instead (leave out cluster:, each daemon reads the whole file), or "
        "produce the changes to a Kafka topic and read that with a kafka source\n")
    p, path = run_with(tmp_path, {"sources": [{"name": "k", "table": table, "kafka": {
        "brokers": "127.0.0.1:9", "topics": ["t"], "group": "g", "start": "latest"}}]})
    assert p.returncode == 2
    assert ("sources[0].kafka.start: latest cannot be used in a cluster: a member that gains "
            "partitions when the cluster is resized must read their whole history; use start: "
            "earliest\n") in p.stderr
    p, path = run_with(tmp_path, {}, ["--set", "cluster.ordinal=cdcview-3"])
    assert (p.returncode, p.stderr) == (
        2, "cdcviewd: --set cluster.ordinal=cdcview-3: cluster.ordinal: ordinal 3 (from "
           "\"cdcview-3\") is not below members (3): members are numbered 0 to 2; set "
           "cluster.members to the StatefulSet's replicas\n")
    p, path = run_with(tmp_path, {}, ["--set", "cluster.peers=[\"a:1\"]"])
    assert (p.returncode, p.stderr) == (
        2, "cdcviewd: --set cluster.peers=[\"a:1\"]: cluster.peers: expected 3 addresses, one "
           "per member (members: 3), got 1; list every member's gRPC address by ordinal, or "
           "give one string with {i} for the ordinal\n")

