"""A real Apache Kafka broker for the Kafka tests, and helpers to fill and read its topics.

The session fixture `kafka` runs scripts/kafka.sh (Kafka's own jars from Maven Central, a
single-node KRaft broker on a free loopback port) in a temporary directory and stops it at the
end. With KAFKA_BOOTSTRAP=host:port in the environment the tests use that broker instead.
"""

import os
import subprocess
import time
import uuid
import zlib

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import REPO

SCRIPT = os.path.join(REPO, "scripts", "kafka.sh")
PARTITIONS = 6


class Kafka:
    def __init__(self, bootstrap):
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def topic(self, prefix, partitions=PARTITIONS):
        """Creates a fresh topic (unique name) and waits until it is usable."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        futures = self.admin.create_topics([NewTopic(name, num_partitions=partitions,
                                                     replication_factor=1)])
        futures[name].result(timeout=30)
        deadline = time.monotonic() + 30
        while True:
            md = self.admin.list_topics(name, timeout=10)
            t = md.topics.get(name)
            if t is not None and t.error is None and len(t.partitions) == partitions and all(
                    p.leader >= 0 for p in t.partitions.values()):
                return name
            if time.monotonic() > deadline:
                pytest.fail(f"topic {name} has no leaders after 30s")
            time.sleep(0.1)

    def producer(self):
        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20,
                         "batch.num.messages": 10000, "queue.buffering.max.messages": 500000,
                         "acks": "all"})

    def produce(self, topic, messages):
        """Produces (partition, key, value[, headers]) tuples and waits for every ack."""
        p = self.producer()
        errors = []

        def delivered(err, _msg):
            if err is not None:
                errors.append(err)

        for n, m in enumerate(messages):
            partition, key, value = m[:3]
            while True:
                try:
                    p.produce(topic, value=value, key=key, partition=partition,
                              on_delivery=delivered)
                    break
                except BufferError:
                    p.poll(0.05)
            if n % 1000 == 0:
                p.poll(0)
        left = p.flush(60)
        assert left == 0 and not errors, f"{left} messages unsent, errors {errors[:3]}"

    def high_watermarks(self, topic, partitions=PARTITIONS):
        """{"topic/p": high watermark} for every partition."""
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "watermarks"})
        try:
            return {f"{topic}/{p}": c.get_watermark_offsets(TopicPartition(topic, p),
                                                            timeout=10)[1]
                    for p in range(partitions)}
        finally:
            c.close()

    def read_all(self, topic, partitions=1, timeout=30):
        """Every message of `topic` (from the start), as confluent_kafka Messages."""
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                      "enable.partition.eof": True, "auto.offset.reset": "earliest"})
        try:
            want = self.high_watermarks(topic, partitions)
            c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
            out, deadline = [], time.monotonic() + timeout
            while len(out) < sum(want.values()):
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    out.append(m)
                if time.monotonic() > deadline:
                    pytest.fail(f"read {len(out)} of {sum(want.values())} messages of {topic}")
            return out
        finally:
            c.close()

    def group_members(self, group):
        """{member client id: sorted partitions} of a consumer group, as the broker sees it."""
        try:
            result = self.admin.describe_consumer_groups([group])[group].result(timeout=10)
        except KafkaException as e:  # e.g. NOT_COORDINATOR while the offsets topic is new
            return {}, f"unknown ({e})"
        return {m.member_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
                for m in result.members}, str(result.state)


def partition_of(key_text):
    """The partition of an item: stable, so every change of one item lands in one partition."""
    return zlib.crc32(key_text.encode()) % PARTITIONS


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if bootstrap:
        yield Kafka(bootstrap)
        return
    run_dir = str(tmp_path_factory.mktemp("kafka"))
    started = subprocess.run([SCRIPT, "start", run_dir], capture_output=True, text=True,
                             timeout=900)
    if started.returncode != 0:
        pytest.fail(f"{SCRIPT} start failed ({started.returncode}):\n{started.stderr[-3000:]}",
                    pytrace=False)
    # The address file, not stdout: tools the script runs may print to stdout too.
    with open(os.path.join(run_dir, "bootstrap")) as f:
        broker = Kafka(f.read().strip())
    try:
        yield broker
    finally:
        broker.admin = None  # no client left retrying a stopped broker
        subprocess.run([SCRIPT, "stop", run_dir], capture_output=True, text=True, timeout=120)


__all__ = ["Kafka", "kafka", "partition_of", "KafkaException", "PARTITIONS"]
