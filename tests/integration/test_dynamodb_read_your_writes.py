"""examples/dynamodb_read_your_writes.py against a real daemon fed from a real Kafka topic: the
boto3 hooks make a query sent right after a write see it (x-cdcview-min-kafka-offsets from the
producer's delivery report; a query that names an offset before it is even written waits for
it), and a second client given the first one's applied position (x-cdcview-min-position) never
reads older data than the first one saw."""

import base64
import importlib.util
import json
import os
import threading
import time

import pytest

from conftest import REPO, wait_for
from dynamodb_env import REGION
from kafka_fixture import kafka  # noqa: F401 (fixture)
from test_dynamodb_api import DYNAMODB_LINE


def load_example():
    path = os.path.join(REPO, "examples", "dynamodb_read_your_writes.py")
    spec = importlib.util.spec_from_file_location("dynamodb_read_your_writes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(n, pk, day):
    """One DynamoDB Streams INSERT of PK=pk with GSI1PK=day (dynamodb-json on Kafka)."""
    return json.dumps({
        "eventID": f"e{n}", "eventName": "INSERT",
        "dynamodb": {
            "ApproximateCreationDateTime": time.time(),
            "Keys": {"PK": {"S": pk}},
            "NewImage": {"PK": {"S": pk}, "GSI1PK": {"S": day}, "n": {"N": str(n)}},
            "SequenceNumber": str(1000 + n),
        },
    })


def client(url):
    import boto3
    import botocore.config
    return boto3.client("dynamodb", endpoint_url=url, region_name=REGION,
                        aws_access_key_id="any", aws_secret_access_key="any",
                        config=botocore.config.Config(retries={"max_attempts": 1}))


def query_day(ddb, day):
    r = ddb.query(TableName="App", IndexName="ByDay", KeyConditionExpression="GSI1PK = :d",
                  ExpressionAttributeValues={":d": {"S": day}})
    return sorted(i["PK"]["S"] for i in r["Items"])


def test_a_query_right_after_a_write_sees_it_with_the_hooks(daemon_factory, kafka):  # noqa: F811
    from confluent_kafka import Producer

    example = load_example()
    topic = kafka.topic("ryw", partitions=2)
    d = daemon_factory({
        "server": {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0", "dynamodb": "127.0.0.1:0"},
        # A slow applier: a batch waits up to 300 ms, so a read that does not wait would
        # usually be answered before the write is applied.
        "apply": {"max_delay_ms": 300, "batch_size": 100000},
        "sources": [{"name": "events", "table": "App", "kafka": {
            "brokers": kafka.bootstrap, "topics": [topic], "group": f"g-{topic}",
            "format": "dynamodb-json",
            "properties": {"heartbeat.interval.ms": "300", "session.timeout.ms": "6000"}}}],
        "tables": [{"name": "App", "key": {"partition": "PK"},
                    "views": [{"name": "ByDay", "partition_key": {"attribute": "GSI1PK",
                                                                  "type": "S"}}]}],
    }).start()
    url = "http://127.0.0.1:" + wait_for(
        "the DynamoDB port in the log", lambda: DYNAMODB_LINE.search(d.log())).group(1)
    ddb = client(url)
    session = example.ReadYourWrites(ddb)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all"})

    for n in range(6):
        reports = []
        producer.produce(topic, key=f"I{n}".encode(), value=record(n, f"I{n}", "D1").encode(),
                         partition=n % 2,
                         on_delivery=lambda err, msg: reports.append((err, msg.partition(),
                                                                      msg.offset())))
        assert producer.flush(30) == 0
        (err, partition, offset), = reports
        assert err is None
        # The write, reported as the example shows, then the read at once.
        session.wrote(topic, partition, offset)
        assert query_day(ddb, "D1") == sorted(f"I{k}" for k in range(n + 1)), n
        # The answer's position covers the write: cdcview's AppliedPosition token, base64.
        assert session.position and base64.b64decode(session.position, validate=True)

    # The wait is real: a read that names an offset not yet written (partition 1's next) is
    # sent before the write happens, and its answer still has the write.
    next_offset = session.kafka_offsets[(topic, 1)] + 1
    late = []

    def write_later():
        time.sleep(0.5)
        producer.produce(topic, key=b"late", value=record(99, "late", "D2").encode(),
                         partition=1, on_delivery=lambda err, msg: late.append(msg.offset()))
        producer.flush(30)

    writer = threading.Thread(target=write_later)
    writer.start()
    session.wrote(topic, 1, next_offset)
    assert query_day(ddb, "D2") == ["late"]
    writer.join()
    assert late == [next_offset]

    # The headers the hooks sent, as the server read them: a malformed one is refused by name.
    raw = client(url)
    raw.meta.events.register("before-sign.dynamodb.Query",
                             lambda request, **_: request.headers.__setitem__(
                                 "x-cdcview-min-kafka-offsets", "no-offset-here"))
    with pytest.raises(raw.exceptions.ClientError) as e:
        query_day(raw, "D1")
    assert e.value.response["Error"]["Code"] == "ValidationException"
    assert e.value.response["Error"]["Message"] == (
        'x-cdcview-min-kafka-offsets: entry "no-offset-here" is not topic/partition=offset '
        '(entries joined by ",")')

    # Monotonic reads on another client: the first client's position makes it wait for
    # everything the first client saw.
    reports = []
    producer.produce(topic, key=b"I6", value=record(6, "I6", "D1").encode(), partition=0,
                     on_delivery=lambda err, msg: reports.append(msg.offset()))
    assert producer.flush(30) == 0
    session.wrote(topic, 0, reports[0])
    assert query_day(ddb, "D1") == [f"I{k}" for k in range(7)]
    other = client(url)
    example.ReadYourWrites(other, position=session.position)
    assert query_day(other, "D1") == [f"I{k}" for k in range(7)]
    del producer
    d.stop()
