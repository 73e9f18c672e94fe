"""A scripted DynamoDB Streams endpoint (http.server) for what moto cannot produce: parent and
child shards, expired iterators, throttling, 5xx errors and trimmed data; and a scripted table
(DescribeTable, Scan) for the snapshot: provisioned read capacity, consumed capacity per page,
pages held until the test releases them.

Shards hold records the test appends; iterators are opaque tokens naming a shard and an index.
Faults are scripted per call: `throttle(call, n)` answers the next n calls with
ProvisionedThroughputExceededException, `expire_next(n)` answers the next n GetRecords with
ExpiredIteratorException (only on the shard named, if one is), `fail(call, n)` answers the
next n calls with HTTP 500, `trim(shard, count)` drops the first records of a shard (reading
from before them is TrimmedDataAccessException). `hold(call)` makes every later `call` wait
until `release(call, n)` lets n of them through (or `release(call)` all). Each call is logged
in `calls` with its body and the time it arrived (`times`). Every request's SigV4 signature is
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
    # created: ApproximateCreationDateTime, epoch seconds
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
        self.expire_shard = None
        self.waiting = {}      # call -> bodies of held requests not yet released
        self.ended = {}        # shard -> index in `calls` of its last page (no NextShardIterator)
        self.failures = {}     # call -> remaining HTTP 500 answers
        self.times = []        # time.monotonic() of each call in `calls`
        self.gates = {}        # call -> threading.Semaphore while held
        self.table_items = []  # the scripted table, in Scan order
        self.read_capacity = 0           # provisioned ReadCapacityUnits (0: on demand)
        self.item_count = None           # DescribeTable's ItemCount (default: the items)
        self.scan_page_size = 1000
        self.scan_capacity_per_page = 1.0
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

    def append(self, shard_id, name, keys, new_image=None, ttl=False, created=1740787200):
        with self.lock:
            self.next_seq += 1
            self.shards[shard_id].records.append(
                (self.next_seq, record(self.next_seq, name, keys, new_image, ttl, created)))
            return self.next_seq

    def close(self, shard_id):
        with self.lock:
            self.shards[shard_id].closed = True

    def throttle(self, call, n):
        with self.lock:
            self.throttles[call] = n

    def expire_next(self, n, shard=None):
        with self.lock:
            self.expire = n
            self.expire_shard = shard

    def fail(self, call, n):
        with self.lock:
            self.failures[call] = n

    def hold(self, call):
        with self.lock:
            self.gates[call] = threading.Semaphore(0)

    def release(self, call, n=None):
        """Lets n held calls through, or ends the hold (n None)."""
        with self.lock:
            gate = self.gates[call] if n is not None else self.gates.pop(call, None)
        if gate is not None:
            for _ in range(n if n is not None else 1000):
                gate.release()

    def gates_waiting(self, call):
        """The held calls of `call` waiting for a release, as [body]."""
        with self.lock:
            return list(self.waiting.get(call, []))

    def call_log(self, call=None):
        """[(call, body, time)] in arrival order."""
        with self.lock:
            return [(c, b, t) for (c, b), t in zip(self.calls, self.times)
                    if call is None or c == call]

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
                with fake.lock:
                    gate = fake.gates.get(call)
                    if gate is not None:
                        fake.waiting.setdefault(call, []).append(body)
                if gate is not None:
                    gate.acquire()
                    with fake.lock:
                        fake.waiting[call].remove(body)
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
            self.times.append(time.monotonic())
            if self.throttles.get(call, 0) > 0:
                self.throttles[call] -= 1
                return self._error("ProvisionedThroughputExceededException", "throttled")
            if self.failures.get(call, 0) > 0:
                self.failures[call] -= 1
                return self._error("InternalServerError", "scripted failure", status=500)
            if call == "ListStreams":
                return 200, {"Streams": [{"StreamArn": STREAM_ARN, "TableName": TABLE,
                                          "StreamLabel": "2025-03-01T00:00:00.000"}]}
            if call == "DescribeStream":
                return self._describe(body)
            if call == "GetShardIterator":
                return self._iterator(body)
            if call == "GetRecords":
                return self._records(body)
            if call == "DescribeTable":
                return 200, {"Table": {
                    "TableName": TABLE, "ItemCount": (len(self.table_items) if self.item_count is None
                                                      else self.item_count),
                    "ProvisionedThroughput": {"ReadCapacityUnits": self.read_capacity,
                                              "WriteCapacityUnits": self.read_capacity}}}
            if call == "Scan":
                return self._scan(body)
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
        sid, index, _ = body["ShardIterator"].split("|")
        if self.expire > 0 and self.expire_shard in (None, sid):
            self.expire -= 1
            return self._error("ExpiredIteratorException", "Iterator expired")
        s, index = self.shards[sid], int(index)
        if index < s.trimmed:
            return self._error("TrimmedDataAccessException", "records were trimmed")
        page = s.records[index:index + int(body.get("Limit", 1000))]
        out = {"Records": [r for _, r in page]}
        end = index + len(page)
        if not (s.closed and end >= len(s.records)):
            out["NextShardIterator"] = f"{sid}|{end}|{time.monotonic()}"
        else:
            self.ended.setdefault(sid, len(self.calls) - 1)
        return 200, out

    def _scan(self, body):
        # Segment s of n holds the items at positions i with i % n == s, in table order; the
        # LastEvaluatedKey is the last item's key, and the next page starts after it.
        segment, total = body.get("Segment", 0), body.get("TotalSegments", 1)
        items = [it for i, it in enumerate(self.table_items) if i % total == segment]
        start = 0
        if "ExclusiveStartKey" in body:
            key = body["ExclusiveStartKey"]
            start = next(i for i, it in enumerate(items)
                         if {k: it[k] for k in key} == key) + 1
        limit = min(int(body.get("Limit", 1000)), self.scan_page_size)
        page = items[start:start + limit]
        out = {"Items": page, "Count": len(page), "ScannedCount": len(page),
               "ConsumedCapacity": {"TableName": TABLE,
                                    "CapacityUnits": self.scan_capacity_per_page}}
        if start + limit < len(items):
            out["LastEvaluatedKey"] = {"PK": page[-1]["PK"], "SK": page[-1]["SK"]}
        return 200, out
