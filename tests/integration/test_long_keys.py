"""Keys over LMDB's 511 bytes, up to DynamoDB's limits (a 2,048-byte partition key, a 1,024-byte
sort key): a file source's items and their view entries are stored and read back exactly, in
order, on both ports; keys over the limits are dead-lettered. The reference model says what
every answer must be."""

import json
import os
import random

import grpc
import pytest

import reference as ref
from conftest import entry_to_tuple, item_to_typed, metric, ref_tuple

TABLE = {
    "name": "T",
    "key": {"partition": "PK", "sort": "SK"},
    "views": [
        {"name": "ByG", "partition_key": {"attribute": "G", "type": "S"},
         "sort_key": {"attribute": "GS", "type": "S"}, "projection": "ALL"},
        {"name": "All", "partition_key": {"template": "ALL"},
         "sort_key": {"attribute": "GS", "type": "S"}, "projection": "KEYS_ONLY"},
    ],
}
VIEWS = ["ByG", "All"]

# Values sharing 600-byte prefixes that differ only at their ends, at the limits, and short ones.
P, S_, T = "p" * 600, "s" * 600, "t" * 600
PKS = [P, P + "0", P + "1", P + "1" + "z" * 1447, P + "2", P + "\0", P + "\0a", "short", "p" * 2048]
SKS = [S_, S_ + "0", S_ + "10", S_ + "2", S_ + "z" * 424, "a"]
GS = ["g" * 2048, "g" * 2047 + "h", "g" * 600, "short"]
GSS = [T, T + "0", T + "1", T + "10", T + "2", T + "z" * 424, "a", "t" * 511, "t" * 512,
       T + "z" * 1448]


def record(kind, seq, keys, image=None, old=None):
    body = {"ApproximateCreationDateTime": 1740787300, "Keys": keys,
            "SequenceNumber": str(10 ** 20 + seq), "StreamViewType": "NEW_AND_OLD_IMAGES"}
    if image is not None:
        body["NewImage"] = image
    if old is not None:
        body["OldImage"] = old
    return json.dumps({"eventName": kind, "dynamodb": body})


def stream():
    """The NDJSON lines, and the line numbers that must be rejected (reason, message)."""
    rng = random.Random(19)
    lines, images, seq = [], {}, 0
    for pk in PKS:
        for sk in SKS:
            if rng.random() < 0.4:
                continue
            keys = {"PK": {"S": pk}, "SK": {"S": sk}}
            image = dict(keys, G={"S": rng.choice(GS)}, GS={"S": rng.choice(GSS)},
                         n={"N": str(len(lines))})
            seq += 1
            lines.append(record("INSERT", seq, keys, image))
            images[(pk, sk)] = image
    for (pk, sk), image in sorted(images.items())[::3]:
        keys = {"PK": image["PK"], "SK": image["SK"]}
        seq += 1
        if rng.random() < 0.5:  # the entries move: the old long-key ones must go
            new = dict(image, G={"S": rng.choice(GS)}, GS={"S": rng.choice(GSS)})
            lines.append(record("MODIFY", seq, keys, new, image))
        else:
            lines.append(record("REMOVE", seq, keys, old=image))
    bad = {}
    over = [
        ({"PK": {"S": "p" * 2049}, "SK": {"S": "a"}}, {}, "bad_key",
         "table T: partition key PK is 2049 bytes, over DynamoDB's limit of 2048 bytes"),
        ({"PK": {"S": "a"}, "SK": {"S": "s" * 1025}}, {}, "bad_key",
         "table T: sort key SK is 1025 bytes, over DynamoDB's limit of 1024 bytes"),
        ({"PK": {"S": "a"}, "SK": {"S": "a"}}, {"G": {"S": "g" * 2049}, "GS": {"S": "a"}},
         "key_too_large", "view ByG: partition key is 2049 bytes, over DynamoDB's limit of 2048 bytes"),
        ({"PK": {"S": "a"}, "SK": {"S": "b"}}, {"G": {"S": "g"}, "GS": {"S": "t" * 2049}},
         "key_too_large", "view ByG: sort key is 2049 bytes, over DynamoDB's limit of 2048 bytes"),
    ]
    for keys, rest, reason, message in over:
        seq += 1
        lines.append(record("INSERT", seq, keys, dict(keys, **rest)))
        bad[len(lines)] = (reason, message)
    return lines, bad


@pytest.fixture(scope="module")
def long_keys(tmp_path_factory, pb, binaries):
    from conftest import Daemon
    workdir = tmp_path_factory.mktemp("long_keys")
    lines, bad = stream()
    path = workdir / "stream.ndjson"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    model = ref.build(TABLE, [(n, json.loads(t)) for n, t in enumerate(lines, 1)])
    d = Daemon(workdir, {"sources": [{"name": "src", "table": "T", "file": {"path": str(path)}}],
                         "tables": [TABLE]}, stubs=pb,
               args=["--set", "server.fast_reads=127.0.0.1:0"])
    try:
        d.start()
        d.wait_finished("src", path)
        assert d.fast_addr is not None, d.log()[-2000:]
        with grpc.insecure_channel(d.fast_addr) as channel:
            d.ports = {"main": d.stub, "fast": pb.grpc.ViewServiceStub(channel)}
            yield d, lines, bad, model
    finally:
        d.discard()


def av(pb, typed):
    (kind, body), = typed.items()
    return pb.av.AttributeValue(**{kind.lower(): body})


def test_the_model_holds_long_keys_and_rejects_only_those_over_the_limits(long_keys):
    _, lines, bad, model = long_keys
    assert [(n, r, m) for n, r, m in model.rejections] == [(n, *bad[n]) for n in sorted(bad)]
    lengths = [len(pk[1].encode()) for pk, _ in model.items]
    assert max(lengths) == 2048 and min(lengths) < 511
    assert len(model.scan("All")) > 20


def test_rejections_are_dead_lettered_and_counted(long_keys):
    d, lines, bad, model = long_keys
    with open(os.path.join(d.store, "dead-letters", "src.ndjson"), encoding="utf-8") as f:
        letters = [json.loads(line) for line in f]
    assert letters == [{"source": "src", "locator": f"line {n}", "reason": f"line {n}: {m}",
                        "record": lines[n - 1]} for n, (_, m) in sorted(bad.items())]
    m = d.metrics()
    assert metric(m, "cdcview_rejected_events_total", reason="bad_key", source="src") == 2
    assert metric(m, "cdcview_rejected_events_total", reason="key_too_large", source="src") == 2
    assert metric(m, "cdcview_events_total", result="applied", source="src") == \
        model.outcomes["applied"]


@pytest.mark.parametrize("port", ["main", "fast"])
@pytest.mark.parametrize("limit", [0, 2])
@pytest.mark.parametrize("view", VIEWS)
def test_scan_is_exact(long_keys, port, view, limit):
    d, _, _, model = long_keys
    stub, vs = d.ports[port], d.stubs.vs
    got, token = [], b""
    for _ in range(1000):
        r = stub.Scan(vs.ScanRequest(view=view, limit=limit, page_token=token), timeout=30)
        assert len(r.entries) <= (limit or 1000)
        got.extend(entry_to_tuple(e) for e in r.entries)
        token = r.next_page_token
        if not token:
            break
    assert got == [ref_tuple(e) for e in model.scan(view)]


CONDITIONS = [
    (None, None, None),
    ("BEGINS_WITH", T, None),
    ("BEGINS_WITH", T + "1", None),
    ("BEGINS_WITH", "t" * 511, None),
    ("BETWEEN", T + "0", T + "10"),
    ("BETWEEN", "a", T),
    ("LT", T + "1", None),
    ("LE", T + "10", None),
    ("GT", T + "1", None),
    ("GE", "t" * 512, None),
    ("EQ", T + "z" * 424, None),
]


@pytest.mark.parametrize("port", ["main", "fast"])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("op,value,value2", CONDITIONS)
def test_query_is_exact_across_pages(long_keys, port, backward, op, value, value2):
    d, _, _, model = long_keys
    stub, vs = d.ports[port], d.stubs.vs
    for view, pks in (("ByG", GS), ("All", ["ALL"])):
        for pk in pks:
            want = [ref_tuple(e) for e in model.query(
                view, {"S": pk}, op, value and {"S": value}, value2 and {"S": value2}, backward)]
            for limit in (0, 1, 3):
                req = vs.QueryRequest(view=view, partition_key=av(d.stubs, {"S": pk}), limit=limit,
                                      scan_backward=backward)
                if op is not None:
                    req.sort.op = vs.SortCondition.Op.Value(op)
                    req.sort.value.CopyFrom(av(d.stubs, {"S": value}))
                    if value2 is not None:
                        req.sort.value2.CopyFrom(av(d.stubs, {"S": value2}))
                got = []
                for _ in range(1000):
                    r = stub.Query(req, timeout=30)
                    got.extend(entry_to_tuple(e) for e in r.entries)
                    if not r.next_page_token:
                        break
                    req.page_token = r.next_page_token
                assert got == want, (view, len(pk), limit)


@pytest.mark.parametrize("port", ["main", "fast"])
def test_get_item_is_exact(long_keys, port):
    d, _, _, model = long_keys
    stub, vs = d.ports[port], d.stubs.vs
    asked = 0
    for pk in PKS:
        for sk in SKS + [SKS[-2][:-1], SKS[-2][:-1] + "y"]:  # and keys that differ at the end
            key = d.stubs.av.Item(attributes={"PK": av(d.stubs, {"S": pk}),
                                              "SK": av(d.stubs, {"S": sk})})
            r = stub.GetItem(vs.GetItemRequest(table="T", key=key), timeout=10)
            want = model.get_item({"PK": {"S": pk}, "SK": {"S": sk}})
            assert (r.found, item_to_typed(r.item) if r.found else None) == (want is not None, want)
            asked += 1
    assert asked == len(PKS) * (len(SKS) + 2)
