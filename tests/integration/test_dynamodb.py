"""The DynamoDB Streams source against real endpoints: moto's DynamoDB (the differential test
against its GSIs, kill -9, snapshot, the vote scenario) and a scripted Streams endpoint
(shard lineage, expired iterators, throttling, trimmed data, SigV4 checked by botocore)."""

import json
import os
import random
import threading
import time
from decimal import Decimal

import pytest

from conftest import dashboard_metric_names, health, metric, to_typed, wait_for
from dynamodb_env import MotoServer, create_table, source_config
from fake_streams_endpoint import FakeStreams

S = lambda v: {"S": v}  # noqa: E731
N = lambda v: {"N": str(v)}  # noqa: E731


@pytest.fixture(scope="module")
def moto():
    server = MotoServer()
    yield server
    server.stop()


@pytest.fixture
def fake():
    f = FakeStreams()
    yield f
    f.stop()


def table_config(name="App", views=()):
    return {"name": name, "key": {"partition": "PK", "sort": "SK"}, "views": list(views)}


def view(name, pk, pk_type="S", sk=None, sk_type="S"):
    v = {"name": name, "partition_key": {"attribute": pk, "type": pk_type}, "projection": "ALL"}
    if sk:
        v["sort_key"] = {"attribute": sk, "type": sk_type}
    return v


def last_sequence_numbers(moto, table):
    """shard id -> the last sequence number in moto's stream of `table`."""
    streams = moto.client("dynamodbstreams")
    arn = streams.list_streams(TableName=table)["Streams"][0]["StreamArn"]
    out = {}
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"],
                                        ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        last = None
        while it:
            r = streams.get_records(ShardIterator=it, Limit=1000)
            if r["Records"]:
                last = r["Records"][-1]["dynamodb"]["SequenceNumber"]
            elif last is not None or not r["Records"]:
                break
            it = r.get("NextShardIterator")
        out[shard["ShardId"]] = last
    return out


def stream_record_count(moto, table):
    streams = moto.client("dynamodbstreams")
    arn = streams.list_streams(TableName=table)["Streams"][0]["StreamArn"]
    total = 0
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"],
                                        ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while it:
            r = streams.get_records(ShardIterator=it, Limit=1000)
            if not r["Records"]:
                break
            total += len(r["Records"])
            it = r.get("NextShardIterator")
    return total


def wait_caught_up(d, moto, table, source="app"):
    want = {k: v for k, v in last_sequence_numbers(moto, table).items() if v}

    def done():
        s = d.source(source)
        got = {p.partition: p.position for p in s.positions}
        return all(got.get(k) == v for k, v in want.items())

    wait_for(f"source {source} to apply the stream up to {want}", done,
             describe=lambda: f"{d.source(source)}")


def query_all(d, view_name, pk, sort=None, backward=False, limit=7):
    """Our Query, every page, as [(sort key typed, item typed)]."""
    vs = d.stubs.vs
    out, token = [], b""
    while True:
        req = vs.QueryRequest(view=view_name, partition_key=pk, limit=limit,
                              scan_backward=backward, page_token=token)
        if sort is not None:
            req.sort.CopyFrom(sort)
        r = d.stub.Query(req, timeout=30)
        for e in r.entries:
            out.append((to_typed(e.sort_key) if e.HasField("sort_key") else None,
                        {k: to_typed(v) for k, v in e.item.attributes.items()}))
        token = r.next_page_token
        if not token:
            return out


def av(pb, typed):
    (kind, value), = typed.items()
    a = pb.av.AttributeValue()
    if kind == "S":
        a.s = value
    else:
        a.n = value
    return a


# ---------------------------------------------------------------- the vote scenario

def test_vote_scenario_one_view_query_answers_what_four_gsi_queries_do(daemon_factory, moto):
    ddb = moto.client()
    create_table(ddb, "Votes", [("GSI1", "GSI1PK", "GSI1SK", "ALL")])
    rng = random.Random(20250301)
    shards = {}
    for user in ("cy", "ann", "bob"):
        shards[user] = rng.randrange(4)
        ddb.put_item(TableName="Votes", Item={
            "PK": S(f"VOTE#{user}"), "SK": S("2025-03-01"),
            "GSI1PK": S(f"DAY#2025-03-01#{shards[user]}"), "GSI1SK": S(user)})
    # The seed spreads the three votes over more than one write shard, so the merge is real.
    assert len(set(shards.values())) > 1, shards
    by_day = dict(view("VotesByDay", "GSI1PK", sk="GSI1SK"), shards={"count": 4, "suffix": "#{shard}"})
    d = daemon_factory({"sources": [source_config(moto.url, table="Votes")],
                        "tables": [table_config("Votes", [view("GSI1", "GSI1PK", sk="GSI1SK"),
                                                          by_day])]})
    d.start()
    wait_caught_up(d, moto, "Votes")
    # DynamoDB: one Query per write shard, each answer in order, merged by the caller.
    dynamo, per_shard = [], {}
    for shard in range(4):
        r = ddb.query(TableName="Votes", IndexName="GSI1",
                      KeyConditionExpression="GSI1PK = :p",
                      ExpressionAttributeValues={":p": S(f"DAY#2025-03-01#{shard}")})
        per_shard[shard] = [i["GSI1SK"]["S"] for i in r["Items"]]
        dynamo += per_shard[shard]
    assert sorted(dynamo) == ["ann", "bob", "cy"]
    # Our unsharded view answers each physical key exactly as the GSI does.
    for shard in range(4):
        ours_shard = [sk["S"] for sk, _ in query_all(d, "GSI1", av(d.stubs, S(f"DAY#2025-03-01#{shard}")))]
        assert ours_shard == per_shard[shard], shard
    # The sharded view answers the logical key in ONE Query, merged in sort-key order.
    r = d.stub.Query(d.stubs.vs.QueryRequest(view="VotesByDay",
                                             partition_key=av(d.stubs, S("DAY#2025-03-01"))),
                     timeout=30)
    assert [to_typed(e.sort_key)["S"] for e in r.entries] == ["ann", "bob", "cy"]
    assert [to_typed(e.partition_key)["S"] for e in r.entries] == \
        [f"DAY#2025-03-01#{shards[u]}" for u in ("ann", "bob", "cy")]
    assert not r.next_page_token
    d.stop()


# ---------------------------------------------------------------- differential against moto's GSIs

GSIS = [("GSI1", "GSI1PK", "GSI1SK", "ALL"),        # overloaded generic keys
        ("Open", "OpenPK", "OpenSK", "ALL"),        # sparse: few items have OpenPK
        ("Inverted", "SK", "PK", "ALL"),            # the table key swapped
        ("ByScore", "board", "score", "ALL")]       # numeric sort key
VIEWS = [view("GSI1", "GSI1PK", sk="GSI1SK"), view("Open", "OpenPK", sk="OpenSK"),
         {"name": "Inverted", "inverted": True, "projection": "ALL"},
         view("ByScore", "board", sk="score", sk_type="N")]
SK_TYPES = {"GSI1": "S", "Open": "S", "Inverted": "S", "ByScore": "N"}
KEYS = {name: (pk, sk) for name, pk, sk, _ in GSIS}


def random_number(rng):
    value = Decimal(rng.randrange(-5000, 5000)) / Decimal(rng.choice([1, 10, 100]))
    text = format(value.normalize(), "f")
    return "0" if text in ("-0", "0") else text


def random_gsi_attributes(rng):
    attrs = {}
    if rng.random() < 0.8:
        attrs["GSI1PK"] = S(rng.choice(["USER#", "ORDER#", "ITEM#", "TAG#", "X"]) + str(rng.randrange(3)))
        attrs["GSI1SK"] = S(rng.choice(["", "a", "a#", "a#1", "b", "b#2", "~", "2025-03-0"]) + str(rng.randrange(40)))
    if rng.random() < 0.15:
        attrs["OpenPK"] = S("OPEN")
        attrs["OpenSK"] = S(f"2025-03-{rng.randrange(1, 29):02d}T{rng.randrange(24):02d}")
    if rng.random() < 0.7:
        attrs["board"] = S(f"board{rng.randrange(4)}")
        attrs["score"] = N(random_number(rng))
    return attrs


def run_workload(ddb, table, ops, seed, put_share=0.45, update_share=0.40):
    """Puts, updates that add, change and remove GSI key attributes, and deletes. Puts and
    deletes go out as BatchWriteItem (25 at most, one key at most once per batch, as DynamoDB
    requires); each item still has its own stream record. An update runs at once unless its
    key waits in the batch (then the batch goes first), so operations on one key keep their
    order. Returns the counts."""
    rng = random.Random(seed)
    keys = [(f"E#{i:03d}", sk) for i in range(300) for sk in ("A", "B", "META")]
    counts = {"put": 0, "update": 0, "delete": 0}
    batch = []

    def flush():
        if batch:
            ddb.batch_write_item(RequestItems={table: list(batch)})
            batch.clear()

    def batched(request, key):
        if len(batch) == 25 or any(_key_of(r) == key for r in batch):
            flush()
        batch.append(request)

    for n in range(ops):
        pk, sk = rng.choice(keys)
        key = {"PK": S(pk), "SK": S(sk)}
        roll = rng.random()
        if roll < put_share:
            item = dict(key, n=N(n), **random_gsi_attributes(rng))
            batched({"PutRequest": {"Item": item}}, key)
            counts["put"] += 1
        elif roll < put_share + update_share:
            if any(_key_of(r) == key for r in batch):
                flush()
            counts["update"] += 1
            attrs = random_gsi_attributes(rng)
            names = ["GSI1PK", "GSI1SK", "OpenPK", "OpenSK", "board", "score"]
            # Key attributes go in pairs so no item has half a GSI key (moto and DynamoDB agree).
            pairs = [("GSI1PK", "GSI1SK"), ("OpenPK", "OpenSK"), ("board", "score")]
            sets, removes, values = [f"n = :n"], [], {":n": N(n)}
            for a, b in pairs:
                if a in attrs:
                    sets += [f"{a} = :{a}", f"{b} = :{b}"]
                    values[f":{a}"], values[f":{b}"] = attrs[a], attrs[b]
                elif rng.random() < 0.5:
                    removes += [a, b]
            expr = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
            assert all(x in names for x in removes)
            ddb.update_item(TableName=table, Key=key, UpdateExpression=expr,
                            ExpressionAttributeValues=values)
        else:
            batched({"DeleteRequest": {"Key": key}}, key)
            counts["delete"] += 1
    flush()
    return counts


def _key_of(request):
    if "PutRequest" in request:
        item = request["PutRequest"]["Item"]
        return {"PK": item["PK"], "SK": item["SK"]}
    return request["DeleteRequest"]["Key"]


def dynamo_query(ddb, table, index, pk_attr, pk, cond=None, forward=True, limit=25):
    """moto's Query on the GSI, every page, as [(sort key typed, item)]."""
    sk_attr = KEYS[index][1]
    expr, values, names = "#p = :p", {":p": pk}, {"#p": pk_attr}
    if cond:
        op, a, b = cond
        names["#s"] = sk_attr
        values[":a"] = a
        if op == "BETWEEN":
            values[":b"] = b
            expr += " AND #s BETWEEN :a AND :b"
        elif op == "BEGINS_WITH":
            expr += " AND begins_with(#s, :a)"
        else:
            expr += f" AND #s {op} :a"
    out, start = [], None
    while True:
        kwargs = dict(TableName=table, IndexName=index, KeyConditionExpression=expr,
                      ExpressionAttributeValues=values, ExpressionAttributeNames=names,
                      ScanIndexForward=forward, Limit=limit)
        if start:
            kwargs["ExclusiveStartKey"] = start
        r = ddb.query(**kwargs)
        out += [(i[sk_attr], i) for i in r["Items"]]
        start = r.get("LastEvaluatedKey")
        if not start:
            return out


def same_answer(ours, theirs):
    """Item for item in sort-key order; DynamoDB leaves the order of equal sort keys open, so
    within a run of equal sort keys the items are compared as a set."""
    if [sk for sk, _ in ours] != [sk for sk, _ in theirs]:
        return False
    groups = {}
    for side, rows in (("ours", ours), ("theirs", theirs)):
        for sk, item in rows:
            groups.setdefault((str(sk), side), []).append(repr(sorted(item.items())))
    return all(sorted(v) == sorted(groups.get((k[0], "theirs"), []))
               for k, v in groups.items() if k[1] == "ours")


def sort_conditions(sk_type, values):
    """Every sort condition with boundary values: the smallest, the largest, the middle and
    values just outside the range, each with =, <, <=, >, >=; BETWEEN; begins_with."""
    ordered = sorted(set(values), key=(lambda v: Decimal(v)) if sk_type == "N" else None)
    if not ordered:
        return [None]
    lo, mid, hi = ordered[0], ordered[len(ordered) // 2], ordered[-1]
    if sk_type == "N":
        outside = [str(Decimal(lo) - 1), str(Decimal(hi) + 1)]
    else:
        outside = ["", hi + "\x7f"]
    picks = [v for v in [lo, mid, hi] + outside if sk_type == "S" or v != ""]
    conds = [None]
    typed = (lambda v: N(v)) if sk_type == "N" else (lambda v: S(v))
    for v in picks:
        if sk_type == "S" and v == "":
            continue  # DynamoDB refuses an empty string key condition value
        for op in ("=", "<", "<=", ">", ">="):
            conds.append((op, typed(v), None))
    conds.append(("BETWEEN", typed(lo), typed(mid)))
    conds.append(("BETWEEN", typed(mid), typed(hi)))
    conds.append(("BETWEEN", typed(lo), typed(lo)))
    # Values absent from the data: below the minimum, above the maximum, and (numbers) between
    # two stored values; BETWEEN with bounds outside the data or between stored values.
    if sk_type == "N":
        below, above = str(Decimal(lo) - 1), str(Decimal(hi) + 1)
    else:
        below, above = (" " if " " < lo else None), hi + "\x7f"
    if below is not None:
        for op in ("=", "<", "<=", ">", ">="):
            conds.append((op, typed(below), None))
        conds.append(("BETWEEN", typed(below), typed(lo)))
        conds.append(("BETWEEN", typed(below), typed(above)))
    conds.append(("BETWEEN", typed(hi), typed(above)))
    conds.append(("BETWEEN", typed(above), typed(above)))
    if sk_type == "N" and len(ordered) >= 2:
        a_, b_ = ordered[len(ordered) // 2 - 1], ordered[len(ordered) // 2]
        gap = (Decimal(a_) + Decimal(b_)) / 2
        if Decimal(a_) < gap < Decimal(b_):
            g = format(gap.normalize(), "f")
            for op in ("=", "<", ">="):
                conds.append((op, typed(g), None))
            conds.append(("BETWEEN", typed(g), typed(g)))
            conds.append(("BETWEEN", typed(g), typed(hi)))
    if sk_type == "S" and mid:
        conds.append(("BEGINS_WITH", typed(mid[:1]), None))
        conds.append(("BEGINS_WITH", typed(mid), None))
        conds.append(("BEGINS_WITH", typed("zz#none"), None))  # matches nothing
        conds.append(("BEGINS_WITH", typed(above), None))
    return conds


OPS = {"=": 1, "<": 2, "<=": 3, ">": 4, ">=": 5, "BETWEEN": 6, "BEGINS_WITH": 7}


def our_condition(pb, cond):
    if cond is None:
        return None
    op, a, b = cond
    c = pb.vs.SortCondition(op=OPS[op], value=av(pb, a))
    if b is not None:
        c.value2.CopyFrom(av(pb, b))
    return c


def test_differential_every_gsi_query_answers_as_dynamodb(daemon_factory, moto):
    ddb = moto.client()
    create_table(ddb, "Diff", GSIS, attribute_types={"score": "N"})
    d = daemon_factory({"sources": [source_config(moto.url, table="Diff", name="app",
                                                  shard_concurrency=2)],
                        "tables": [table_config("Diff", VIEWS)]})
    d.start()
    started = time.monotonic()
    counts = run_workload(ddb, "Diff", 7900, seed=4, put_share=0.65, update_share=0.25)
    print(f"differential workload: {counts} in {time.monotonic() - started:.1f} s")
    assert counts["put"] >= 5000 and counts["update"] >= 1500 and counts["delete"] >= 500, counts
    wait_caught_up(d, moto, "Diff")
    s = d.source("app")
    assert s.events_rejected == 0 and s.events_skipped == 0, s

    items = []
    start = None
    while True:
        kwargs = {"TableName": "Diff"}
        if start:
            kwargs["ExclusiveStartKey"] = start
        r = ddb.scan(**kwargs)
        items += r["Items"]
        start = r.get("LastEvaluatedKey")
        if not start:
            break
    queries = mismatches = 0
    for index, pk_attr, sk_attr, _ in GSIS:
        partitions = {}
        for item in items:
            if pk_attr in item and sk_attr in item:
                partitions.setdefault(item[pk_attr]["S"], []).append(
                    list(item[sk_attr].values())[0])
        assert partitions, f"the workload put nothing into {index}"
        for pk, values in sorted(partitions.items()):
            for cond in sort_conditions(SK_TYPES[index], values):
                for forward in (True, False):
                    theirs = dynamo_query(ddb, "Diff", index, pk_attr, S(pk), cond, forward,
                                          limit=3 if cond is None else 50)
                    ours = query_all(d, index, av(d.stubs, S(pk)), our_condition(d.stubs, cond),
                                     backward=not forward, limit=3 if cond is None else 7)
                    queries += 1
                    if not same_answer(ours, theirs):
                        mismatches += 1
                        assert ours == theirs, f"{index} pk={pk} {cond} forward={forward}"
    assert mismatches == 0
    assert queries > 300, queries
    print(f"differential: {len(items)} items, {queries} queries, all equal")
    d.stop()


# ---------------------------------------------------------------- other stream view types

def test_new_image_stream_matches_the_gsis_and_keys_only_is_refused_with_the_fix(
        daemon_factory, moto):
    ddb = moto.client()
    create_table(ddb, "NewImg", GSIS, view_type="NEW_IMAGE", attribute_types={"score": "N"})
    create_table(ddb, "KeysOnly", [("GSI1", "GSI1PK", "GSI1SK", "ALL")], view_type="KEYS_ONLY")
    d = daemon_factory({"sources": [source_config(moto.url, table="NewImg"),
                                    source_config(moto.url, table="KeysOnly", name="keys")],
                        "tables": [table_config("NewImg", VIEWS),
                                   table_config("KeysOnly", [view("KeysGSI1", "GSI1PK", sk="GSI1SK")])]})
    d.start()
    counts = run_workload(ddb, "NewImg", 800, seed=11)
    assert min(counts.values()) > 50, counts
    ddb.put_item(TableName="KeysOnly", Item=item("k1", "1"))
    ddb.put_item(TableName="KeysOnly", Item=item("k2", "1"))
    ddb.update_item(TableName="KeysOnly", Key=keys("k1", "1"), UpdateExpression="SET n = :n",
                    ExpressionAttributeValues={":n": N(5)})
    ddb.delete_item(TableName="KeysOnly", Key=keys("k2", "1"))
    wait_caught_up(d, moto, "NewImg")
    wait_caught_up(d, moto, "KeysOnly", source="keys")
    # NEW_IMAGE: no old images, yet every GSI answers as DynamoDB's.
    s = d.source("app")
    assert s.events_rejected == 0 and s.events_skipped == 0, s
    for index, pk_attr, sk_attr, _ in GSIS:
        pks = set()
        for it in ddb.scan(TableName="NewImg")["Items"]:
            if pk_attr in it and sk_attr in it:
                pks.add(it[pk_attr]["S"])
        assert pks, index
        for pk in sorted(pks):
            assert same_answer(query_all(d, index, av(d.stubs, S(pk))),
                               dynamo_query(ddb, "NewImg", index, pk_attr, S(pk))), (index, pk)
    # KEYS_ONLY: INSERT and MODIFY carry no image, so they are refused, dead-lettered with the
    # fix; the REMOVE needs only the keys.
    s = d.source("keys")
    assert (s.events_applied, s.events_rejected) == (1, 3), s
    with open(os.path.join(d.store, "dead-letters", "keys.ndjson"), encoding="utf-8") as f:
        letters = [json.loads(line) for line in f]
    assert len(letters) == 3
    for letter in letters:
        assert ("(stream view type KEYS_ONLY carries no image; use NEW_IMAGE or "
                "NEW_AND_OLD_IMAGES)") in letter["reason"], letter
    assert query_all(d, "KeysGSI1", av(d.stubs, S("G"))) == []
    d.stop()


# ---------------------------------------------------------------- kill -9 and restart

def test_kill_9_during_ingestion_reapplies_and_skips_nothing(daemon_factory, moto):
    ddb = moto.client()
    create_table(ddb, "Crash", GSIS, attribute_types={"score": "N"})
    run_workload(ddb, "Crash", 3000, seed=9)
    d = daemon_factory({"sources": [source_config(moto.url, table="Crash")],
                        "tables": [table_config("Crash", VIEWS)],
                        "apply": {"batch_size": 16, "max_delay_ms": 1}})
    d.start()
    wait_for("some records applied", lambda: d.source("app").events_applied > 200)
    d.kill()
    d.start()
    wait_caught_up(d, moto, "Crash")
    s = d.source("app")
    # A record read again would be counted as skipped (its sequence number is not newer).
    assert s.events_skipped == 0 and s.events_rejected == 0
    total = stream_record_count(moto, "Crash")
    assert 0 < s.events_applied < total, (s.events_applied, total)
    for index, pk_attr, sk_attr, _ in GSIS:
        pks = set()
        for item in ddb.scan(TableName="Crash")["Items"]:
            if pk_attr in item and sk_attr in item:
                pks.add(item[pk_attr]["S"])
        for pk in sorted(pks):
            assert same_answer(query_all(d, index, av(d.stubs, S(pk))),
                               dynamo_query(ddb, "Crash", index, pk_attr, S(pk))), (index, pk)
    d.stop()


# ---------------------------------------------------------------- the scripted Streams endpoint

def fake_config(fake, **extra):
    return {"sources": [source_config(fake.url, **extra)],
            "tables": [table_config("App", [view("GSI1", "GSI1PK", sk="GSI1SK")])]}


def item(pk, sk, g="G", n=0):
    return {"PK": S(pk), "SK": S(sk), "GSI1PK": S(g), "GSI1SK": S(f"{pk}#{sk}"), "n": N(n)}


def keys(pk, sk):
    return {"PK": S(pk), "SK": S(sk)}


def gsi(d, pk="G"):
    return [(sk["S"], it["n"]["N"]) for sk, it in query_all(d, "GSI1", av(d.stubs, S(pk)))]


def gauge(d, name, **labels):
    """A metric's value, or None while it is not exported."""
    return d.metrics().get((name, frozenset(dict(source="app", **labels).items())))


def shard_of(call, body):
    return body["ShardId"] if call == "GetShardIterator" else body["ShardIterator"].split("|")[0]


def shard_calls(fake):
    """[(index in the call log, call, shard)] of GetShardIterator and GetRecords."""
    return [(i, c, shard_of(c, b)) for i, (c, b, _) in enumerate(fake.call_log())
            if c in ("GetShardIterator", "GetRecords")]


def test_lineage_expiry_throttling_errors_ttl_and_signatures(daemon_factory, fake):
    fake.add_shard("shard-root")
    fake.add_shard("shard-child", parent="shard-root")
    fake.add_shard("shard-other")
    fake.append("shard-root", "INSERT", keys("a", "1"), item("a", "1", n=1))
    fake.append("shard-root", "INSERT", keys("b", "1"), item("b", "1", n=1))
    fake.close("shard-root")
    # The child changes what the parent wrote: applied before the parent, the views would
    # end with the parent's older images.
    fake.append("shard-child", "MODIFY", keys("a", "1"), item("a", "1", n=2))
    fake.append("shard-child", "REMOVE", keys("b", "1"), ttl=True)
    fake.append("shard-other", "INSERT", keys("c", "1"), item("c", "1", n=1))
    fake.throttle("GetRecords", 3)
    fake.throttle("DescribeStream", 1)
    fake.hold("GetRecords")  # the parent cannot finish until the test lets it
    d = daemon_factory(fake_config(fake))
    d.start()
    wait_for("the child waiting for its parent",
             lambda: (gauge(d, "cdcview_dynamodb_shards", state="waiting_parent"),
                      gauge(d, "cdcview_dynamodb_shards", state="open"),
                      gauge(d, "cdcview_dynamodb_shards", state="closed")) == (1, 2, 0),
             describe=lambda: str(d.source("app")))
    time.sleep(0.5)  # several discovery rounds: the child must still not be touched
    assert [s for _, _, s in shard_calls(fake)].count("shard-child") == 0
    assert gauge(d, "cdcview_dynamodb_shards", state="waiting_parent") == 1
    fake.release("GetRecords")
    wait_for("the child shard applied",
             lambda: d.positions("app").get("shard-child") == str(fake.next_seq - 1),
             describe=lambda: str(d.source("app")))
    assert gsi(d) == [("a#1", "2"), ("c#1", "1")]
    assert d.positions("app")["shard-root"] == "END"
    # The child's iterator was asked for only after the parent's last page (the GetRecords
    # answered without NextShardIterator), and the parent was never read again after it.
    calls = shard_calls(fake)
    root_end = fake.ended["shard-root"]
    first_child = min(i for i, _, s in calls if s == "shard-child")
    assert root_end < first_child, (root_end, first_child)
    assert [c for i, c, s in calls if s == "shard-root" and i > root_end] == []
    assert [c for _, c, s in calls if s == "shard-child"][0] == "GetShardIterator"

    # Expired iterators (both on shard-other): obtained again after the last sequence number read.
    last = fake.next_seq
    fake.expire_next(2, shard="shard-other")
    fake.append("shard-other", "INSERT", keys("d", "1"), item("d", "1", n=1))
    wait_for("the record after the expired iterators",
             lambda: d.positions("app").get("shard-other") == str(last + 1))
    after = [b for b in fake.bodies("GetShardIterator")
             if b["ShardId"] == "shard-other" and b["ShardIteratorType"] == "AFTER_SEQUENCE_NUMBER"]
    assert len(after) == 2 and all(b["SequenceNumber"] == str(last) for b in after), after

    # 5xx answers are backed off and retried; the record arrives.
    fake.fail("GetRecords", 2)
    seq = fake.append("shard-other", "INSERT", keys("e", "1"), item("e", "1", n=1))
    wait_for("the record after the 5xx answers",
             lambda: d.positions("app").get("shard-other") == str(seq))

    # A split after the start: shard-other closes, its child appears; DescribeStream finds it.
    fake.close("shard-other")
    fake.add_shard("shard-split", parent="shard-other")
    seq = fake.append("shard-split", "INSERT", keys("f", "1"), item("f", "1", n=1))
    wait_for("the new shard found and applied",
             lambda: d.positions("app").get("shard-split") == str(seq),
             describe=lambda: str(d.positions("app")))
    assert d.positions("app")["shard-other"] == "END"
    calls = shard_calls(fake)
    assert fake.ended["shard-other"] < min(i for i, _, s in calls if s == "shard-split")
    assert [c for i, c, s in calls if s == "shard-other" and i > fake.ended["shard-other"]] == []
    assert gsi(d) == [("a#1", "2"), ("c#1", "1"), ("d#1", "1"), ("e#1", "1"), ("f#1", "1")]

    m = d.metrics()
    assert metric(m, "cdcview_dynamodb_requests_total", source="app", call="GetRecords",
                  result="throttled") == 3
    assert metric(m, "cdcview_dynamodb_requests_total", source="app", call="DescribeStream",
                  result="throttled") == 1
    assert metric(m, "cdcview_dynamodb_requests_total", source="app", call="GetRecords",
                  result="ExpiredIteratorException") == 2
    assert metric(m, "cdcview_dynamodb_requests_total", source="app", call="GetRecords",
                  result="server_error") == 2
    assert metric(m, "cdcview_ttl_deletes_total", source="app") == 1
    assert metric(m, "cdcview_dynamodb_trimmed_data_total", source="app") == 0
    # Finished shards are forgotten: shard-child and shard-split are open, nothing else known.
    wait_for("the closed shards forgotten",
             lambda: gauge(d, "cdcview_dynamodb_shards", state="closed") == 0)
    m = d.metrics()
    assert metric(m, "cdcview_dynamodb_shards", source="app", state="open") == 2
    assert metric(m, "cdcview_dynamodb_shards", source="app", state="waiting_parent") == 0
    s = d.source("app")
    # Eight events, each applied once; the END markers only move positions.
    assert (s.kind, s.events_applied, s.events_skipped, s.events_rejected) == ("dynamodb", 8, 0, 0)
    assert s.state in ("running", "caught_up"), s
    assert fake.bad_signatures == [] and fake.signatures_checked > 10

    # A restart skips the shards stored as END and resumes the open ones after their stored
    # sequence numbers.
    stored = d.positions("app")
    d.stop()
    n = len(fake.call_log())
    d.start()
    wait_for("caught up after the restart", lambda: d.source("app").state == "caught_up")
    calls = [(c, s) for i, c, s in shard_calls(fake) if i >= n]
    assert {s for _, s in calls} == {"shard-child", "shard-split"}, calls
    resumed = [b for c, b, _ in fake.call_log()[n:] if c == "GetShardIterator"]
    assert sorted((b["ShardId"], b["ShardIteratorType"], b["SequenceNumber"]) for b in resumed) == \
        [(sid, "AFTER_SEQUENCE_NUMBER", stored[sid]) for sid in ("shard-child", "shard-split")]
    assert d.source("app").events_applied == 0  # nothing read again
    d.stop()


def test_shard_concurrency_bounds_the_reads_in_flight(daemon_factory, fake):
    for i in range(3):
        fake.add_shard(f"shard-{i}")
        fake.append(f"shard-{i}", "INSERT", keys(f"k{i}", "1"), item(f"k{i}", "1", n=i))
    fake.hold("GetRecords")
    d = daemon_factory(fake_config(fake, shard_concurrency=2))
    d.start()
    wait_for("two reads in flight", lambda: len(fake.gates_waiting("GetRecords")) == 2)
    time.sleep(0.5)
    assert len(fake.gates_waiting("GetRecords")) == 2  # the third shard waits for a reader
    fake.release("GetRecords")
    wait_for("all three applied", lambda: len(gsi(d)) == 3)
    d.stop()


def test_start_latest_iterator_age_lag_and_idle_polling(daemon_factory, fake):
    fake.add_shard("shard-old")
    fake.append("shard-old", "INSERT", keys("x", "1"), item("x", "1", n=1))
    fake.close("shard-old")
    fake.add_shard("shard-1", parent="shard-old")
    fake.append("shard-1", "INSERT", keys("y", "1"), item("y", "1", n=1))
    d = daemon_factory(fake_config(fake, start="latest", poll_interval_ms=200,
                                   discovery_interval_ms=1000))
    d.start()
    wait_for("shard-1 read", lambda: fake.count("GetRecords") > 0)
    # A fresh store with start: latest: the closed shard is skipped, the open one starts at LATEST.
    assert [(b["ShardId"], b["ShardIteratorType"]) for b in fake.bodies("GetShardIterator")] == \
        [("shard-1", "LATEST")]
    # One GetRecords gets the new record; the next one waits, so the age stays the record's.
    fake.hold("GetRecords")
    started = time.time()
    seq = fake.append("shard-1", "INSERT", keys("z", "1"), item("z", "1", n=1),
                      created=int(started) - 30)
    fake.release("GetRecords", 1)
    wait_for("the new record applied", lambda: d.positions("app").get("shard-1") == str(seq))
    wait_for("the next GetRecords held", lambda: len(fake.gates_waiting("GetRecords")) == 1)
    assert gsi(d) == [("z#1", "1")]  # x and y were written before the start
    m = d.metrics()
    bound = time.time() - started + 31  # the record was 30 s to 31 s old when read
    age = metric(m, "cdcview_dynamodb_iterator_age_seconds", source="app", shard="shard-1")
    assert 30 <= age <= bound, age
    lag = metric(m, "cdcview_source_lag_seconds", source="app")
    assert 30 <= lag <= bound, lag
    assert metric(m, "cdcview_replication_lag_seconds_count") == 1
    assert 30 <= metric(m, "cdcview_replication_lag_seconds_sum") <= bound
    assert metric(m, "cdcview_replication_lag_seconds_bucket", le="30") == 0
    assert metric(m, "cdcview_replication_lag_seconds_bucket", le="60") == 1
    fake.release("GetRecords")

    # An idle stream costs one GetRecords per shard per poll interval, and one DescribeStream
    # round (two pages here) per discovery interval.
    wait_for("caught up", lambda: d.source("app").state == "caught_up")
    records, describes, t0 = fake.count("GetRecords"), fake.count("DescribeStream"), time.monotonic()
    time.sleep(3)
    window = time.monotonic() - t0
    records, describes = fake.count("GetRecords") - records, fake.count("DescribeStream") - describes
    # Caught up, the shard's iterator age is 0 (not the age of the last record, frozen).
    assert gauge(d, "cdcview_dynamodb_iterator_age_seconds", shard="shard-1") == 0
    print(f"idle stream: {records} GetRecords and {describes} DescribeStream in {window:.2f} s")
    assert 0.5 * window / 0.2 <= records <= window / 0.2 + 1, (records, window)
    assert describes <= 2 * (window / 1.0 + 1), (describes, window)
    d.stop()


def test_trimmed_data_is_reported_loudly_and_reading_continues(daemon_factory, fake):
    fake.add_shard("shard-1")
    for i in range(3):
        fake.append("shard-1", "INSERT", keys(f"k{i}", "1"), item(f"k{i}", "1", n=i))
    d = daemon_factory(fake_config(fake))
    d.start()
    wait_for("three records", lambda: d.positions("app").get("shard-1") == str(fake.next_seq))
    d.stop()
    for i in range(3, 6):
        fake.append("shard-1", "INSERT", keys(f"k{i}", "1"), item(f"k{i}", "1", n=i))
    fake.trim("shard-1", 4)  # k3 is gone before it was read
    d.start()
    wait_for("the records after the trim", lambda: d.positions("app").get("shard-1") == str(fake.next_seq))
    s = d.source("app")
    assert s.state == "error"
    assert "shard shard-1 of arn:aws:dynamodb:us-east-1:123456789012:table/App/stream/" in s.error
    assert ("stream records were trimmed before they were read, so changes are missing from the views"
            in s.error), s.error
    assert s.error.endswith("continuing from TRIM_HORIZON; to repair, start a new store with snapshot: scan")
    assert metric(d.metrics(), "cdcview_dynamodb_trimmed_data_total", source="app") == 1
    assert "stream records were trimmed" in d.log()
    assert [k for k, _ in gsi(d)] == ["k0#1", "k1#1", "k2#1", "k4#1", "k5#1"]
    # The loss is stored with the views: a restart still reports it (only a new store repairs it).
    error = s.error
    d.stop()
    d.start()
    s = d.source("app")
    assert (s.state, s.error) == ("error", error)
    assert d.positions("app")["trimmed"] == error
    assert_token_round_trip(d, {"trimmed": error})
    d.stop()


def test_missing_credentials_are_named(daemon_factory, fake, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    fake.add_shard("shard-1")
    d = daemon_factory(fake_config(fake))
    d.start()
    s = d.source("app")
    assert s.state == "error"
    assert s.error.startswith("source app: no AWS credentials found: set AWS_ACCESS_KEY_ID and "
                              "AWS_SECRET_ACCESS_KEY"), s.error
    assert fake.calls == []
    d.stop()


# ---------------------------------------------------------------- snapshot

def test_snapshot_killed_after_the_shard_positions_before_any_scan_page_still_scans(
        daemon_factory, fake):
    """The kill lands after the snapshot's shard positions are committed and before the first
    Scan page: a restart must still scan (the marker says the snapshot is unfinished)."""
    fake.add_shard("shard-1")
    fake.table_items = [item(f"t{i}", "1", n=i) for i in range(6)]  # only the Scan sees these
    seq = fake.append("shard-1", "INSERT", keys("s", "1"), item("s", "1", n=1))
    fake.hold("Scan")
    d = daemon_factory(fake_config(fake, snapshot="scan", scan_segments=2))
    d.start()
    wait_for("the shard positions committed, the Scan asked",
             lambda: d.positions("app").get("shard-1") == "TRIM_HORIZON" and
             len(fake.gates_waiting("Scan")) == 2,
             describe=lambda: f"{d.positions('app')} {fake.gates_waiting('Scan')}")
    assert d.positions("app") == {"snapshot": "started", "shard-1": "TRIM_HORIZON"}
    d.kill()
    fake.release("Scan")
    d.start()
    wait_for("the snapshot done", lambda: d.source("app").state in ("running", "caught_up"),
             describe=lambda: str(d.source("app")))
    assert gsi(d) == [("s#1", "1")] + [(f"t{i}#1", str(i)) for i in range(6)]
    assert d.positions("app") == {"snapshot": "done", "shard-1": str(seq),
                                  "scan/0": "DONE", "scan/1": "DONE"}
    assert_token_round_trip(d, {"snapshot": "done", "scan/0": "DONE"})
    d.stop()


def assert_token_round_trip(d, markers):
    """A Query's applied-position token, markers included, is accepted as min_position."""
    vs = d.stubs.vs
    r = d.stub.Query(vs.QueryRequest(view="GSI1", partition_key=av(d.stubs, S("G"))), timeout=10)
    got = {e.partition: e.position for e in r.applied.entries if e.source == "app"}
    assert {k: got.get(k) for k in markers} == markers, got
    again = d.stub.Query(vs.QueryRequest(view="GSI1", partition_key=av(d.stubs, S("G")),
                                         consistency=vs.ReadConsistency(min_position=r.applied.token)),
                         timeout=10)
    assert len(again.entries) == len(r.entries)


def test_snapshot_resumes_each_segment_after_its_stored_key(daemon_factory, fake):
    fake.add_shard("shard-1")
    fake.table_items = [item(f"t{i}", "1", n=i) for i in range(6)]
    fake.scan_page_size = 2  # three pages
    fake.hold("Scan")
    d = daemon_factory(fake_config(fake, snapshot="scan", scan_segments=1))
    d.start()
    wait_for("the first Scan asked", lambda: len(fake.gates_waiting("Scan")) == 1)
    fake.release("Scan", 1)
    wait_for("the first page applied", lambda: d.positions("app").get("scan/0", "{}") != "{}",
             describe=lambda: str(d.positions("app")))
    stored = d.positions("app")["scan/0"]
    assert json.loads(stored) == {"PK": S("t1"), "SK": S("1")}
    d.kill()
    fake.release("Scan")
    time.sleep(0.3)  # the held request of the killed daemon is answered (into a closed socket)
    before = fake.count("Scan")
    d.start()
    wait_for("the snapshot done", lambda: d.positions("app").get("snapshot") == "done")
    # After the restart: the second and third pages only, from the stored key.
    resumed = [b for _, b, _ in fake.call_log("Scan")][before:]
    assert [b.get("ExclusiveStartKey") for b in resumed] == \
        [json.loads(stored), {"PK": S("t3"), "SK": S("1")}], resumed
    assert [k for k, _ in gsi(d)] == [f"t{i}#1" for i in range(6)]
    d.stop()


def test_snapshot_progress_rises_and_views_wait_for_the_stream_replay(daemon_factory, fake):
    fake.add_shard("shard-1")
    fake.table_items = [item(f"t{i:02d}", "1", n=i) for i in range(40)]
    fake.scan_page_size = 10
    # The stream holds a later change of t05: until it is replayed, the view is behind.
    seq = fake.append("shard-1", "MODIFY", keys("t05", "1"), item("t05", "1", n=100))
    fake.hold("Scan")
    fake.hold("GetRecords")
    d = daemon_factory(fake_config(fake, snapshot="scan", scan_segments=1))
    d.start()

    def describe_view():
        return d.stub.DescribeView(d.stubs.vs.DescribeViewRequest(view="GSI1"), timeout=10)

    BACKFILLING = d.stubs.vs.ViewDescription.BACKFILLING
    wait_for("the first Scan page asked", lambda: len(fake.gates_waiting("Scan")) == 1)
    seen = []
    for page in range(4):
        s, v = d.source("app"), describe_view()
        assert (s.state, v.state) == ("backfilling", BACKFILLING), (s, v)
        seen.append((s.progress, v.build_progress))
        fake.release("Scan", 1)
        if page < 3:  # the next page is asked once this one's items are pushed
            wait_for(f"page {page + 2} asked", lambda: fake.count("Scan") == page + 1 and
                     len(fake.gates_waiting("Scan")) == 1)
    wait_for("the scan applied", lambda: d.positions("app").get("scan/0") == "DONE")
    # The scan is applied, but the stream replay is held: still BACKFILLING, at 99%.
    time.sleep(1.0)
    s, v = d.source("app"), describe_view()
    assert (s.state, v.state) == ("backfilling", BACKFILLING), (s, v)
    seen.append((s.progress, v.build_progress))
    assert [round(p, 6) for p, _ in seen] == [0.0, 0.25, 0.5, 0.75, 0.99], seen
    assert [round(p, 6) for _, p in seen] == [0.0, 0.25, 0.5, 0.75, 0.99], seen
    assert ("t05#1", "5") in gsi(d)
    fake.release("GetRecords")
    wait_for("the view READY", lambda: describe_view().state == d.stubs.vs.ViewDescription.READY,
             describe=lambda: str(d.source("app")))
    # READY means the replay has reached the stream as it was when the scan ended.
    assert ("t05#1", "100") in gsi(d)
    assert d.positions("app") == {"snapshot": "done", "shard-1": str(seq), "scan/0": "DONE"}
    assert d.source("app").state in ("running", "caught_up")
    d.stop()


def test_scan_is_paced_to_a_share_of_the_provisioned_read_capacity(daemon_factory, fake):
    fake.add_shard("shard-1")
    fake.table_items = [item(f"t{i:02d}", "1", n=i) for i in range(24)]
    fake.scan_page_size = 3            # 4 pages per segment, 8 in all
    fake.read_capacity = 16            # provisioned; 50% of it is 8 read units per second
    fake.scan_capacity_per_page = 4.0  # so one page per 0.5 s across both segments
    d = daemon_factory(fake_config(fake, snapshot="scan", scan_segments=2,
                                   scan_read_capacity_percent=50))
    d.start()
    wait_for("the snapshot done", lambda: d.positions("app").get("snapshot") == "done",
             describe=lambda: str(d.source("app")))
    times = [t for _, _, t in fake.call_log("Scan")]
    assert len(times) == 8
    offsets = [t - times[0] for t in times]
    print("scan request offsets:", [f"{o:.2f}" for o in offsets])
    # Each page's 4 units push the shared budget on by 0.5 s: the k-th request (from 0) waits
    # for the k - 1 pages before it beyond each segment's free first page.
    for k in range(2, 8):
        assert offsets[k] >= (k - 1) * 0.5 - 0.02, (k, offsets)
    assert "8 read units per second" in d.log()
    assert len(gsi(d)) == 24
    d.stop()



def test_snapshot_scan_resumes_after_kill_and_converges(daemon_factory, moto):
    ddb = moto.client()
    ddb.create_table(TableName="Snap", BillingMode="PAY_PER_REQUEST",
                     KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"},
                                {"AttributeName": "SK", "KeyType": "RANGE"}],
                     AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"}
                                           for a in ("PK", "SK", "GSI1PK", "GSI1SK")],
                     GlobalSecondaryIndexes=[{"IndexName": "GSI1", "Projection": {"ProjectionType": "ALL"},
                                              "KeySchema": [{"AttributeName": "GSI1PK", "KeyType": "HASH"},
                                                            {"AttributeName": "GSI1SK", "KeyType": "RANGE"}]}])
    for i in range(1500):  # before the stream exists: only the Scan can see these
        ddb.put_item(TableName="Snap", Item=item(f"p{i:04d}", "x", g=f"G{i % 5}", n=i))
    ddb.update_table(TableName="Snap", StreamSpecification={"StreamEnabled": True,
                                                            "StreamViewType": "NEW_AND_OLD_IMAGES"})
    config = {"sources": [source_config(moto.url, table="Snap", snapshot="scan", scan_segments=4,
                                        scan_read_units_per_second=20)],
              "tables": [table_config("Snap", [view("GSI1", "GSI1PK", sk="GSI1SK")])]}
    d = daemon_factory(config)
    stop = threading.Event()

    def writer():  # writes continue during the scan
        rng = random.Random(5)
        n = 0
        while not stop.is_set() and n < 400:
            i = rng.randrange(1700)
            if rng.random() < 0.2:
                ddb.delete_item(TableName="Snap", Key=keys(f"p{i:04d}", "x"))
            else:
                ddb.put_item(TableName="Snap", Item=item(f"p{i:04d}", "x", g=f"G{i % 7}", n=10000 + n))
            n += 1
            time.sleep(0.005)

    t = threading.Thread(target=writer)
    t.start()
    seen = {}
    try:
        snapshot_phase(d, seen, ddb, moto, lambda: (stop.set(), t.join()))
    finally:
        stop.set()
        t.join()


def snapshot_phase(d, seen, ddb, moto, finish_writes):
    d.start()

    def mid_scan():
        s = d.source("app")
        got = {p.partition: p.position for p in s.positions if p.partition.startswith("scan/")}
        if s.state == "backfilling":
            seen["state"] = (s.state, s.progress)
            seen["view"] = d.stub.DescribeView(d.stubs.vs.DescribeViewRequest(view="GSI1"), timeout=10)
            seen["after"] = d.source("app")
        return s.state == "backfilling" and got and sum(1 for v in got.values() if v != "DONE") >= 2

    wait_for("the scan half way", mid_scan, interval=0.01, describe=lambda: str(d.source("app")))
    before_kill = d.positions("app")
    d.kill()
    assert seen["view"].state == d.stubs.vs.ViewDescription.BACKFILLING, (seen, d.log())
    # Pages were applied (scan/<i> moved), so items were scanned against moto's live ItemCount.
    assert 0 < seen["view"].build_progress <= 0.99, seen
    assert before_kill["snapshot"] == "started"
    d.start()
    # That the restart Scans on after each stored key, not from zero, is checked request by
    # request against the scripted endpoint (test_snapshot_resumes_each_segment_after_its_
    # stored_key). A count of Scan calls here could not tell: a kill early in the scan leaves
    # nearly the whole (and meanwhile grown) table to scan after the restart.
    # While the scan runs the view answers from a partial table: its health name is not
    # SERVING, although the Scan's batches carry no creation time (a lag of 0).
    backfill_health = []

    def snapshot_done():
        s = d.source("app")
        if s.state == "backfilling":
            backfill_health.append((time.monotonic(), health(d.channel, "cdcview.view.GSI1")))
        return s.state in ("running", "caught_up")

    wait_for("the snapshot done", snapshot_done, interval=0.1, describe=lambda: str(d.source("app")))
    assert backfill_health and {h for _, h in backfill_health} == {2}, backfill_health
    # Long enough for the once-a-second readiness ticker to have judged the view.
    assert backfill_health[-1][0] - backfill_health[0][0] > 2, backfill_health
    finish_writes()
    assert all(d.positions("app")[f"scan/{i}"] == "DONE" for i in range(4))
    wait_caught_up(d, moto, "Snap")
    m = d.metrics()
    # Every DynamoDB metric a dashboard panel or alert names is in the real output.
    exported = {name for name, _ in m}
    # (The DynamoDB endpoint's cdcview_dynamodb_api_* are checked in test_dynamodb_limits.py.)
    ddb_metrics = [n for n in dashboard_metric_names("cdcview_dynamodb_")
                   if not n.startswith("cdcview_dynamodb_api_")]
    assert ddb_metrics == ["cdcview_dynamodb_iterator_age_seconds", "cdcview_dynamodb_requests_total",
                           "cdcview_dynamodb_shards", "cdcview_dynamodb_trimmed_data_total"]
    assert [n for n in ddb_metrics if n not in exported] == []
    for g in range(7):
        theirs = dynamo_query(ddb, "Snap", "GSI1", "GSI1PK", S(f"G{g}"))
        ours = query_all(d, "GSI1", av(d.stubs, S(f"G{g}")))
        assert same_answer(ours, theirs), g
    assert d.stub.DescribeView(d.stubs.vs.DescribeViewRequest(view="GSI1"), timeout=10).state == \
        d.stubs.vs.ViewDescription.READY
    wait_for("cdcview.view.GSI1 SERVING once caught up",
             lambda: health(d.channel, "cdcview.view.GSI1") == 1)
    d.stop()
