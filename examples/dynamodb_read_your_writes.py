"""Read your own writes from cdcview's DynamoDB endpoint with boto3.

A DynamoDB GSI read right after a write may miss it, and DynamoDB refuses ConsistentRead on a
GSI. cdcview can wait instead: a request that carries

  x-cdcview-min-kafka-offsets: topic/partition=offset,...   (a producer's delivery report)
  x-cdcview-min-position: <base64>   (an earlier answer's x-cdcview-applied-position)

is answered once cdcview has applied that much (or fails with PositionNotAppliedException at the
server's deadline). Every Query, Scan, GetItem and BatchGetItem answer carries the position it
was read at in x-cdcview-applied-position. The hooks below add the headers to every read of one
boto3 client: the client's reads then never go back in time (each waits for what the previous
answer had seen) and see every write the caller reports with `wrote`.

    import boto3
    from dynamodb_read_your_writes import ReadYourWrites

    ddb = boto3.client("dynamodb", endpoint_url="http://127.0.0.1:8000")
    session = ReadYourWrites(ddb)
    # ... the caller's write goes to Kafka; its delivery report says (topic, partition, offset):
    session.wrote(topic, partition, offset)
    ddb.query(TableName="App", IndexName="GSI1", KeyConditionExpression="GSI1PK = :pk",
              ExpressionAttributeValues={":pk": {"S": "USER#u007"}})  # includes that write

The positions are cdcview's own: reads that go to another cdcview replica following the same
sources wait there just the same.
"""

READS = ("Query", "Scan", "GetItem", "BatchGetItem")


class ReadYourWrites:
    """Carries cdcview's consistency headers on one boto3 DynamoDB client's reads."""

    def __init__(self, client, position=None):
        self.position = position  # the last x-cdcview-applied-position seen (base64)
        self.kafka_offsets = {}   # (topic, partition) -> the highest offset written
        for op in READS:
            client.meta.events.register(f"before-sign.dynamodb.{op}", self._add_headers)
            client.meta.events.register(f"after-call.dynamodb.{op}", self._remember)

    def wrote(self, topic, partition, offset):
        """Records a write the caller made: the next reads wait until cdcview applied it."""
        key = (topic, partition)
        self.kafka_offsets[key] = max(offset, self.kafka_offsets.get(key, -1))

    def _add_headers(self, request, **_):
        if self.position:
            request.headers["x-cdcview-min-position"] = self.position
        if self.kafka_offsets:
            request.headers["x-cdcview-min-kafka-offsets"] = ",".join(
                f"{t}/{p}={o}" for (t, p), o in sorted(self.kafka_offsets.items()))

    def _remember(self, http_response, **_):
        position = http_response.headers.get("x-cdcview-applied-position")
        if position:
            self.position = position
