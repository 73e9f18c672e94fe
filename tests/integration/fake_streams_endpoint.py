"""A scripted DynamoDB Streams endpoint (http.server) for what moto cannot produce: parent and
child shards, expired iterators, throttling and trimmed data.

Shards hold records the test appends; iterators are opaque tokens naming a shard and an index.
Faults are scripted per call: `throttle(call, n)` answers the next n calls with
ProvisionedThroughputExceededException, `expire_next(n)` answers the next n GetRecords with
ExpiredIteratorException, `trim(shard, count)` drops the first records of a shard (reading
from before them is TrimmedDataAccessException). Every request's SigV4 signature is
recomputed with botocore's SigV4Auth from the request as received and compared: a mismatch
is recorded in `bad_signatures`.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/App/stream/2025-03-01T00:00:00.000"
TABLE = "App"


def record(seq, name, keys, new_image=None, ttl=False, created=1740787200):
    """One Records[] element as DynamoDB Streams sends it."""
    dynamodb = {"Keys": keys, "SequenceNumber": str(seq), "SizeBytes": 10,
                "StreamViewType": "NEW_AND_OLD_IMAGES", "ApproximateCreationDateTime": created}
    if new_image is not None:
        dynamodb["NewImage"] = new_image
    r = {"eventID": f"e{seq}", "eventName": name, "eventVersion": "1.1",
         "eventSource": "aws:dynamodb", "awsRegion": "us-east-1", "dynamodb": dynamodb}
    if ttl:
        r["userIdentity"] = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    return r


class Shard:
    def __init__(self, shard_id, parent=None):
        self.id, self.parent = shard_id, parent
        self.records = []      # (seq, record)
        self.trimmed = 0       # records before this index are gone
        self.closed = False


class FakeStreams:
    def __init__(self):
        self.lock = threading.Lock()
        self.shards = {}       # id -> Shard, in creation order
        self.calls = []        # (call, body)
        self.throttles = {}    # call -> remaining throttled answers
        self.expire = 0
        self.bad_signatures = []
        self.signatures_checked = 0
        self.next_seq = 1000
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    # -- scripting

    def add_shard(self, shard_id, parent=None):
        with self.lock:
            self.shards[shard_id] = Shard(shard_id, parent)

    def append(self, shard_id, name, keys, new_image=None, ttl=False):
        with self.lock:
            self.next_seq += 1
            self.shards[shard_id].records.append(
                (self.next_seq, record(self.next_seq, name, keys, new_image, ttl)))
            return self.next_seq

    def close(self, shard_id):
        with self.lock:
            self.shards[shard_id].closed = True

    def throttle(self, call, n):
        with self.lock:
            self.throttles[call] = n

    def expire_next(self, n):
        with self.lock:
            self.expire = n

    def trim(self, shard_id, count):
        with self.lock:
            self.shards[shard_id].trimmed = count

    def count(self, call):
        with self.lock:
            return sum(1 for c, _ in self.calls if c == call)

    def bodies(self, call):
        with self.lock:
            return [b for c, b in self.calls if c == call]

    # -- the API

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                fake._check_signature(self, body)
                call = self.headers.get("X-Amz-Target", "").split(".")[-1]
                status, answer = fake._answer(call, json.loads(body or b"{}"))
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.0")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def _check_signature(self, request, body):
        import datetime
        from unittest import mock
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        got = request.headers.get("Authorization", "")
        signed = got.split("SignedHeaders=")[1].split(",")[0].split(";") if got else []
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in signed and k.lower() not in ("x-amz-date", "x-amz-security-token")}
        url = f"http://{request.headers['Host']}{request.path}"
        aws_request = AWSRequest(method="POST", url=url, data=body, headers=headers)
        credentials = Credentials("testing", "testing", request.headers.get("X-Amz-Security-Token"))
        # Sign at the request's own X-Amz-Date, as AWS verifies it.
        when = datetime.datetime.strptime(request.headers.get("X-Amz-Date", ""), "%Y%m%dT%H%M%SZ")
        with self.lock, mock.patch("botocore.auth.get_current_datetime", return_value=when):
            SigV4Auth(credentials, "dynamodb", "us-east-1").add_auth(aws_request)
            want = aws_request.headers["Authorization"]
            if want != got:
                self.bad_signatures.append((got, want))
            self.signatures_checked += 1

    def _error(self, type_, message, status=400):
        return status, {"__type": f"com.amazonaws.dynamodb.v20120810#{type_}", "message": message}

    def _answer(self, call, body):
        with self.lock:
            self.calls.append((call, body))
            if self.throttles.get(call, 0) > 0:
                self.throttles[call] -= 1
                return self._error("ProvisionedThroughputExceededException", "throttled")
            if call == "ListStreams":
                return 200, {"Streams": [{"StreamArn": STREAM_ARN, "TableName": TABLE,
                                          "StreamLabel": "2025-03-01T00:00:00.000"}]}
            if call == "DescribeStream":
                return self._describe(body)
            if call == "GetShardIterator":
                return self._iterator(body)
            if call == "GetRecords":
                return self._records(body)
            return self._error("UnknownOperationException", call)

    def _describe(self, body):
        # One shard per page, so the client must follow ExclusiveStartShardId.
        ids = list(self.shards)
        start = body.get("ExclusiveStartShardId")
        index = ids.index(start) + 1 if start in ids else 0
        shards = []
        for sid in ids[index:index + 1]:
            s = self.shards[sid]
            first = s.records[0][0] if s.records else self.next_seq
            rng = {"StartingSequenceNumber": str(first)}
            if s.closed:
                rng["EndingSequenceNumber"] = str(s.records[-1][0] if s.records else first)
            shard = {"ShardId": sid, "SequenceNumberRange": rng}
            if s.parent:
                shard["ParentShardId"] = s.parent
            shards.append(shard)
        d = {"StreamArn": STREAM_ARN, "StreamStatus": "ENABLED", "TableName": TABLE,
             "StreamViewType": "NEW_AND_OLD_IMAGES", "Shards": shards,
             "KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}]}
        if index + 1 < len(ids):
            d["LastEvaluatedShardId"] = ids[index]
        return 200, {"StreamDescription": d}

    def _iterator(self, body):
        s = self.shards.get(body["ShardId"])
        if s is None:
            return self._error("ResourceNotFoundException", f"no shard {body['ShardId']}")
        kind = body["ShardIteratorType"]
        seqs = [q for q, _ in s.records]
        if kind == "TRIM_HORIZON":
            index = s.trimmed
        elif kind == "LATEST":
            index = len(seqs)
        else:
            seq = int(body["SequenceNumber"])
            if seq not in seqs:
                return self._error("ValidationException", f"no sequence number {seq}")
            index = seqs.index(seq) + (1 if kind == "AFTER_SEQUENCE_NUMBER" else 0)
            if index < s.trimmed:
                return self._error("TrimmedDataAccessException", "records were trimmed")
        return 200, {"ShardIterator": f"{s.id}|{index}|{time.monotonic()}"}

    def _records(self, body):
        if self.expire > 0:
            self.expire -= 1
            return self._error("ExpiredIteratorException", "Iterator expired")
        sid, index, _ = body["ShardIterator"].split("|")
        s, index = self.shards[sid], int(index)
        if index < s.trimmed:
            return self._error("TrimmedDataAccessException", "records were trimmed")
        page = s.records[index:index + int(body.get("Limit", 1000))]
        out = {"Records": [r for _, r in page]}
        end = index + len(page)
        if not (s.closed and end >= len(s.records)):
            out["NextShardIterator"] = f"{sid}|{end}|{time.monotonic()}"
        return 200, out
