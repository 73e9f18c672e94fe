"""cdcview's DynamoDB endpoint (`server.dynamodb`) against moto's DynamoDB as the oracle, and the
AWS CLI against the bundled sample.

The differential test writes one seeded workload with boto3 to a moto table whose GSIs mirror
cdcview's views (S, N and B sort keys; KEYS_ONLY, INCLUDE and ALL projections; an inverted
index; a sparse index without sort key; an N partition key), lets cdcview read the table's
stream, then sends the same seeded random requests to both endpoints with low-level boto3
clients and compares the full responses: Items, Count, ScannedCount, LastEvaluatedKey, error
codes and messages.

DynamoDB leaves some things open, and both sides may legitimately differ there:
  - the order of index entries with equal sort keys (and of every entry of an index without a
    sort key): such runs are compared as sets, and a LastEvaluatedKey that ends inside such a
    run is compared by its index key attributes only;
  - the order of Scan results and which segment holds an item: Scans are compared as the
    multiset of every page of every segment.
Where moto departs from DynamoDB's documented behaviour, the test says so at the place and
expects the documented behaviour from cdcview (the comparison with moto is skipped there):
  - moto ends a page at 1,000,000 bytes; DynamoDB at 1 MB (1,048,576), as cdcview does;
  - moto answers LastEvaluatedKey when Limit items matched and any entry of the partition
    follows, even one outside the sort-key range (its next page is then empty); cdcview answers
    it only when another entry of the range follows (the contract: no LastEvaluatedKey at the
    exact end; DynamoDB's documentation allows both). A trailing empty page of moto's is folded;
  - an unknown index: moto "Invalid index: X for table: T. Available indexes are: ..."; DynamoDB
    "The table does not have the specified index: X".
"""

import base64
import json
import os
import random
import re
import subprocess
import sys
from decimal import Decimal

import botocore.config
import botocore.exceptions
import pytest

from conftest import REPO, SAMPLE, Daemon, wait_for
from dynamodb_env import REGION, MotoServer, source_config
from test_dynamodb import wait_caught_up

TABLE = "Shop"
SEED = 20251202
DYNAMODB_LINE = re.compile(r"cdcviewd serving the DynamoDB API \(HTTPS?\) on port (\d+)", re.M)


def S(v):
    return {"S": v}


def N(v):
    return {"N": str(v)}


def B(v):
    return {"B": v}


# ---------------------------------------------------------------- the table and its indexes

# (index name, partition attribute, its type, sort attribute or None, its type, projection,
#  INCLUDE's non-key attributes)
GSIS = [
    ("GSI1", "GSI1PK", "S", "GSI1SK", "S", "ALL", None),
    ("ByScore", "board", "S", "score", "N", "INCLUDE", ["name", "tags"]),
    ("ByStamp", "shelf", "S", "stamp", "B", "KEYS_ONLY", None),
    ("ByMember", "SK", "S", "PK", "S", "KEYS_ONLY", None),   # inverted: the table key swapped
    ("Flagged", "flag", "S", None, None, "ALL", None),       # sparse, no sort key
    ("ByTier", "tier", "N", "name", "S", "INCLUDE", ["score"]),
]
INDEX = {g[0]: g for g in GSIS}
TABLE_KEY = ("PK", "SK")


def create_moto_table(ddb):
    types = {"PK": "S", "SK": "S"}
    indexes = []
    for name, pk, pk_type, sk, sk_type, projection, include in GSIS:
        types[pk] = pk_type
        schema = [{"AttributeName": pk, "KeyType": "HASH"}]
        if sk:
            types[sk] = sk_type
            schema.append({"AttributeName": sk, "KeyType": "RANGE"})
        p = {"ProjectionType": projection}
        if include:
            p["NonKeyAttributes"] = include
        indexes.append({"IndexName": name, "KeySchema": schema, "Projection": p})
    ddb.create_table(
        TableName=TABLE, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"},
                   {"AttributeName": "SK", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": t}
                              for a, t in sorted(types.items())],
        GlobalSecondaryIndexes=indexes,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})


def cdcview_views():
    views = []
    for name, pk, pk_type, sk, sk_type, projection, include in GSIS:
        v = {"name": name}
        if name == "ByMember":
            v["inverted"] = True
        else:
            v["partition_key"] = {"attribute": pk, "type": pk_type}
            if sk:
                v["sort_key"] = {"attribute": sk, "type": sk_type}
        v["projection"] = {"include": include} if include else projection
        views.append(v)
    return views


# ---------------------------------------------------------------- the seeded workload

NUMBERS = ["-1000", "-12.5", "-1", "-0.25", "0", "0.001", "1", "2.5", "10", "10.5", "99",
           "100", "12345.678"]
PKS = [f"U#{i:02d}" for i in range(40)]
SKS = [f"O#{j:02d}" for j in range(12)] + ["PROFILE", "META#a", "META#b"]


def random_item(rng, pk, sk, n):
    item = {"PK": S(pk), "SK": S(sk), "n": N(n)}
    if rng.random() < 0.8:
        item["GSI1PK"] = S(f"G#{rng.randrange(6)}")
        item["GSI1SK"] = S(rng.choice(["2025-01-", "2025-02-", "2025-03-", "a", "a#b", "b"])
                           + str(rng.randrange(30)))
    if rng.random() < 0.7:
        item["board"] = S(f"B{rng.randrange(4)}")
        item["score"] = N(rng.choice(NUMBERS))
    if rng.random() < 0.5:
        item["shelf"] = S(f"K{rng.randrange(3)}")
        item["stamp"] = B(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4))))
    if rng.random() < 0.15:
        item["flag"] = S("on")
    if rng.random() < 0.6:
        item["tier"] = N(rng.randrange(1, 5))
    if rng.random() < 0.9:
        item["name"] = S(rng.choice(["ann", "bob", "cy", "dee", "Émile", "zoë", "a b", "ann"])
                         + str(rng.randrange(5)))
    if rng.random() < 0.5:
        item["tags"] = {"SS": sorted({rng.choice(["red", "green", "blue", "x"])
                                      for _ in range(rng.randrange(1, 4))})}
    if rng.random() < 0.4:
        item["nums"] = {"NS": sorted({rng.choice(NUMBERS) for _ in range(rng.randrange(1, 4))})}
    if rng.random() < 0.5:
        item["active"] = {"BOOL": rng.random() < 0.5}
    if rng.random() < 0.2:
        item["nothing"] = {"NULL": True}
    if rng.random() < 0.5:
        item["list"] = {"L": [S(rng.choice(["p", "q"])), N(rng.choice(NUMBERS)),
                              {"M": {"k": S(rng.choice(["v", "w"]))}}][:rng.randrange(1, 4)]}
    if rng.random() < 0.6:
        profile = {"age": N(rng.randrange(15, 90))}
        if rng.random() < 0.7:
            profile["address"] = {"M": {"city": S(rng.choice(["Oslo", "Lima", "Pune"])),
                                        "zip": S(str(rng.randrange(10000, 99999)))}}
        if rng.random() < 0.3:
            profile["blobby"] = B(b"\x00\xff")
        item["profile"] = {"M": profile}
    if rng.random() < 0.3:
        item["data"] = B(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 6))) or b"\x01")
    if rng.random() < 0.3:
        item["price"] = N(rng.choice(NUMBERS))
    return item


def run_workload(ddb, ops=400, seed=SEED):
    """Puts (new items and replacements), updates that set, change and remove index key
    attributes and nested values, and deletes. Returns the keys written."""
    rng = random.Random(seed)
    for n in range(ops):
        pk, sk = rng.choice(PKS), rng.choice(SKS)
        key = {"PK": S(pk), "SK": S(sk)}
        roll = rng.random()
        if roll < 0.6:
            ddb.put_item(TableName=TABLE, Item=random_item(rng, pk, sk, n))
        elif roll < 0.85:
            sets, removes, values = ["n = :n"], [], {":n": N(n)}
            other = random_item(rng, pk, sk, n)
            for a, b in (("GSI1PK", "GSI1SK"), ("board", "score"), ("shelf", "stamp")):
                if a in other and rng.random() < 0.5:
                    sets += [f"{a} = :{a}", f"{b} = :{b}"]
                    values[f":{a}"], values[f":{b}"] = other[a], other[b]
                elif rng.random() < 0.3:
                    removes += [a, b]
            if rng.random() < 0.3:
                removes.append("flag")
            elif rng.random() < 0.2:
                sets.append("flag = :f")
                values[":f"] = S("on")
            if rng.random() < 0.3:
                sets.append("price = :price")
                values[":price"] = N(rng.choice(NUMBERS))
            expr = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
            ddb.update_item(TableName=TABLE, Key=key, UpdateExpression=expr,
                            ExpressionAttributeValues=values)
        else:
            ddb.delete_item(TableName=TABLE, Key=key)


# ---------------------------------------------------------------- fixtures

def dynamodb_port(d):
    match = wait_for(f"cdcviewd to log its DynamoDB port in {d.log_path}",
                     lambda: DYNAMODB_LINE.search(d.log()), describe=lambda: d.log()[-2000:])
    return int(match.group(1))


def client(url, **kwargs):
    import boto3
    # No retries: a throttled or failed request is an answer to compare, not to hide.
    cfg = botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"})
    return boto3.client("dynamodb", endpoint_url=url, region_name=REGION, config=cfg, **kwargs)


@pytest.fixture(scope="module")
def endpoints(tmp_path_factory, pb, binaries):
    """(moto's client, cdcview's client, the daemon) after the workload is applied."""
    moto = MotoServer()
    workdir = tmp_path_factory.mktemp("ddbapi")
    d = Daemon(workdir, stubs=pb, config={
        "server": {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0", "dynamodb": "127.0.0.1:0"},
        "sources": [source_config(moto.url, table=TABLE, name="shop")],
        "tables": [{"name": TABLE, "key": {"partition": "PK", "sort": "SK"},
                    "views": cdcview_views()}]})
    try:
        theirs = moto.client()
        create_moto_table(theirs)
        run_workload(theirs)
        d.start()
        wait_caught_up(d, moto, TABLE, source="shop")
        ours = client(f"http://127.0.0.1:{dynamodb_port(d)}")
        yield theirs, ours, d
    finally:
        d.discard()
        moto.stop()


# ---------------------------------------------------------------- calling and comparing

def call(c, op, **kwargs):
    """The parsed response without its metadata, or ("error", code, message)."""
    try:
        r = getattr(c, op)(**kwargs)
    except botocore.exceptions.ClientError as e:
        err = e.response.get("Error", {})
        return ("error", err.get("Code"), err.get("Message"),
                e.response["ResponseMetadata"]["HTTPStatusCode"])
    r.pop("ResponseMetadata", None)
    return r


def canon(value):
    """A hashable, printable form of an item or key (bytes as base64, sets sorted)."""
    def enc(v):
        if isinstance(v, bytes):
            return "b64:" + base64.b64encode(v).decode()
        if isinstance(v, dict):
            # A set's order is not defined (moto answers its own): sets compare sorted.
            return {k: sorted(enc(x)) if k in ("SS", "NS", "BS") else enc(x)
                    for k, x in v.items()}
        if isinstance(v, list):
            return [enc(x) for x in v]
        return v
    return json.dumps(enc(value), sort_keys=True)


def sort_value(typed):
    """A comparable form of a typed S, N or B key value (None for a missing one)."""
    if typed is None:
        return (0, "")
    (kind, v), = typed.items()
    if kind == "N":
        return (1, Decimal(v))
    if kind == "B":
        return (2, bytes(v))
    return (3, v.encode())


def tie_groups(items, sk):
    """The items as [(sort value, sorted canonical items)] for runs of equal index sort keys
    (the whole list is one run when the index has no sort key)."""
    groups = []
    for item in items:
        key = sort_value(item.get(sk)) if sk else None
        if groups and groups[-1][0] == key:
            groups[-1][1].append(canon(item))
        else:
            groups.append((key, [canon(item)]))
    return [(k, sorted(v)) for k, v in groups]


def walk(c, op, request, max_pages=500):
    """Every page of a Query or Scan: (pages [(Count, ScannedCount, LEK)], items, error)."""
    pages, items, start = [], [], None
    for _ in range(max_pages):
        kwargs = dict(request)
        if start is not None:
            kwargs["ExclusiveStartKey"] = start
        r = call(c, op, **kwargs)
        if isinstance(r, tuple):
            return pages, items, r
        assert set(r) <= {"Items", "Count", "ScannedCount", "LastEvaluatedKey",
                          "ConsumedCapacity"}, r
        items += r.get("Items", [])
        start = r.get("LastEvaluatedKey")
        pages.append((r["Count"], r["ScannedCount"], start))
        if start is None:
            return pages, items, None
    raise AssertionError(f"{op} {request} never ended")


def fold_empty_last_page(pages):
    """moto's departure: a LastEvaluatedKey before an empty last page (see the module doc)."""
    if len(pages) >= 2 and pages[-1][:2] == (0, 0) and pages[-1][2] is None:
        pages = pages[:-1]
        count, scanned, _ = pages[-1]
        pages[-1] = (count, scanned, None)
    return pages


def index_key_attrs(index):
    _, pk, _, sk, _, _, _ = INDEX[index]
    return [a for a in (pk, sk) if a]


def filtered_index_keys(index, request):
    """The queried index's key attributes a Query's FilterExpression names at its top level."""
    text = request.get("FilterExpression", "")
    names = request.get("ExpressionAttributeNames", {})
    # A document path's first element: a #placeholder or a bare name, not a :value or a function.
    used = {names.get(w, w) for w in re.findall(r"(?<![\w:.#\]])(#?[A-Za-z_]\w*)(?![\w(])", text)}
    return [k for k in index_key_attrs(index) if k in used]


def assert_same_groups(ours, theirs, request):
    """Says which items differ in the first run of equal sort keys that differs."""
    for n, (o, t) in enumerate(zip(ours, theirs)):
        if o != t:
            raise AssertionError(
                f"{request}: run {n} differs: sort key {o[0]} vs moto's {t[0]}; only in "
                f"cdcview's: {sorted(set(o[1]) - set(t[1]))}; only in moto's: "
                f"{sorted(set(t[1]) - set(o[1]))}")
    assert len(ours) == len(theirs), (request, ours[len(theirs):], theirs[len(ours):])


def assert_same_query(index, request, theirs, ours, paged):
    t_pages, t_items, t_err = theirs
    o_pages, o_items, o_err = ours
    if t_err or o_err:
        assert o_err == t_err, f"{request}: cdcview {o_err}, moto {t_err}"
        return
    sk = INDEX[index][3]
    # Items: in order, runs of equal sort keys as sets.
    assert_same_groups(tie_groups(o_items, sk), tie_groups(t_items, sk), request)
    t_pages = fold_empty_last_page(t_pages)
    assert len(o_pages) == len(t_pages), (request, o_pages, t_pages)
    assert [p[1] for p in o_pages] == [p[1] for p in t_pages], (request, o_pages, t_pages)
    assert sum(p[0] for p in o_pages) == sum(p[0] for p in t_pages), request
    ties = any(len(g) > 1 for _, g in tie_groups(o_items, sk)) or sk is None
    for o, t in zip(o_pages, t_pages):
        if (o[2] is None) != (t[2] is None):
            raise AssertionError(f"{request}: LastEvaluatedKey {o[2]} vs moto {t[2]}")
        if o[2] is None:
            continue
        want = set(TABLE_KEY) | set(index_key_attrs(index))
        assert set(o[2]) == want, (request, o[2])
        if ties:
            # Equal sort keys are in an order of each side's choosing: the page may end on a
            # different entry of the run, but on the same index key.
            assert {a: o[2][a] for a in index_key_attrs(index)} == \
                {a: t[2][a] for a in index_key_attrs(index)}, (request, o[2], t[2])
        else:
            assert o[2] == t[2], request
            assert o[0] == t[0], (request, o_pages, t_pages)


# ---------------------------------------------------------------- random requests

FILTERS = [
    # (expression, names, values)
    ("#n = :v", {"#n": "name"}, {":v": S("ann1")}),
    ("#n <> :v", {"#n": "name"}, {":v": S("bob2")}),
    ("price < :v", {}, {":v": N("10")}),
    ("price <= :v", {}, {":v": N("-0.25")}),
    ("price > :v", {}, {":v": N("-1")}),
    ("price >= :v", {}, {":v": N("99")}),
    ("price BETWEEN :a AND :b", {}, {":a": N("-12.5"), ":b": N("10.5")}),
    ("price IN (:a, :b, :c)", {}, {":a": N("0"), ":b": N("100"), ":c": N("2.5")}),
    ("attribute_exists(flag)", {}, {}),
    ("attribute_not_exists(price)", {}, {}),
    ("attribute_type(#d, :t)", {"#d": "data"}, {":t": S("B")}),
    ("attribute_type(nothing, :t)", {}, {":t": S("NULL")}),
    ("attribute_type(tags, :t)", {}, {":t": S("SS")}),
    ("begins_with(#n, :p)", {"#n": "name"}, {":p": S("a")}),
    ("contains(tags, :t)", {}, {":t": S("red")}),
    ("contains(nums, :x)", {}, {":x": N("1")}),
    ("contains(#n, :s)", {"#n": "name"}, {":s": S("e")}),
    # size() of attributes every item has: moto fails (HTTP 500) on size() of a missing one
    # (DynamoDB: the comparison is false); test_requests_moto_fails_on_... checks that.
    ("size(PK) > :n", {}, {":n": N("4")}),
    ("size(SK) = :n", {}, {":n": N("7")}),
    ("size(SK) <= :n", {}, {":n": N("4")}),
    ("active = :t", {}, {":t": {"BOOL": True}}),
    ("NOT active = :t", {}, {":t": {"BOOL": True}}),
    ("profile.address.city = :c", {}, {":c": S("Oslo")}),
    ("#p.#a.zip > :z", {"#p": "profile", "#a": "address"}, {":z": S("50000")}),
    ("profile.age BETWEEN :a AND :b AND attribute_exists(profile.address)", {},
     {":a": N("20"), ":b": N("40")}),
    ("#l[0] = :p OR #l[2].k = :w", {"#l": "list"}, {":p": S("q"), ":w": S("w")}),
    ("(price > :a OR attribute_exists(flag)) AND NOT begins_with(#n, :p)", {"#n": "name"},
     {":a": N("0"), ":p": S("b")}),
    ("attribute_exists(profile.blobby) OR #d = :d", {"#d": "data"}, {":d": B(b"\x01")}),
    ("score > :s", {}, {":s": N("1")}),  # on INCLUDE/ALL indexes only where projected
    ("tier = :l AND NOT (active = :f)", {}, {":l": N("2"), ":f": {"BOOL": False}}),
]

PROJECTIONS = [
    ("PK, SK, #n", {"#n": "name"}),
    ("profile.address.city, tags", {}),
    ("profile.address.zip, #n, profile.age", {"#n": "name"}),
    ("price, nothing, active, #d", {"#d": "data"}),
    ("profile", {}),
]


def key_values(items, attr):
    """Distinct typed values of `attr` among `items` (the moto table's current content)."""
    seen = {}
    for item in items:
        if attr in item:
            seen[canon(item[attr])] = item[attr]
    return sorted(seen.values(), key=sort_value)


def key_condition(rng, index, pk_value, sk_values):
    """(expression, names, values) for the partition equality and maybe a sort condition."""
    _, pk, _, sk, sk_type, _, _ = INDEX[index]
    names, values = {}, {":p": pk_value}
    pk_ref = pk if rng.random() < 0.5 and pk not in ("name",) else "#pk"
    if pk_ref == "#pk":
        names["#pk"] = pk
    parts = [f"{pk_ref} = :p"]
    if sk and sk_values and rng.random() < 0.85:
        names["#sk"] = sk
        a = rng.choice(sk_values)
        b = rng.choice(sk_values)
        if sort_value(a) > sort_value(b):
            a, b = b, a
        ops = ["=", "<", "<=", ">", ">=", "BETWEEN"] + (["begins_with"] if sk_type != "N" else [])
        op = rng.choice(ops)
        if op == "BETWEEN":
            values[":a"], values[":b"] = a, b
            parts.append("#sk BETWEEN :a AND :b")
        elif op == "begins_with":
            (kind, raw), = a.items()
            prefix = raw[:rng.randrange(0, len(raw) + 1)] or raw[:1]
            values[":a"] = {kind: prefix}
            parts.append("begins_with(#sk, :a)")
        else:
            values[":a"] = a
            parts.append(f"#sk {op} :a")
        if rng.random() < 0.3 and op != "BETWEEN":
            # The sort condition first is allowed. (moto fails, HTTP 500, on a BETWEEN first;
            # DynamoDB and cdcview take it: test_requests_moto_fails_on_... checks that.)
            parts.reverse()
    expr = " AND ".join(parts)
    if rng.random() < 0.2:
        expr = f"({expr})"
    return expr, names, values


def random_query(rng, snapshot):
    index = rng.choice(list(INDEX))
    _, pk, _, sk, _, projection, include = INDEX[index]
    pks = key_values(snapshot, pk)
    pk_value = rng.choice(pks) if rng.random() < 0.93 else (
        N("777") if INDEX[index][2] == "N" else S("nobody"))
    members = [i for i in snapshot if canon(i.get(pk)) == canon(pk_value) and (not sk or sk in i)]
    expr, names, values = key_condition(rng, index, pk_value, key_values(members, sk) if sk else [])
    req = {"TableName": TABLE, "IndexName": index, "KeyConditionExpression": expr,
           "ScanIndexForward": rng.random() < 0.6}
    add_filter_projection(rng, req, names, values, projection)
    if names:
        req["ExpressionAttributeNames"] = names
    req["ExpressionAttributeValues"] = values
    if rng.random() < 0.6:
        req["Limit"] = rng.randrange(1, 8)
    return index, req


def add_filter_projection(rng, req, names, values, projection):
    if rng.random() < 0.45 and projection == "ALL":
        expr, n, v = rng.choice(FILTERS)
        # The filter's value placeholders get names of their own (":f" + name), apart from
        # the key condition's.
        req["FilterExpression"] = re.sub(r":(\w+)", r":f\1", expr)
        names.update(n)
        values.update({":f" + k[1:]: x for k, x in v.items()})
    elif rng.random() < 0.15:
        # On a KEYS_ONLY or INCLUDE index a filter sees only the projected attributes.
        req["FilterExpression"] = "attribute_exists(#f) OR size(PK) > :sz"
        names["#f"] = "name"
        values[":sz"] = N("3")
    roll = rng.random()
    if roll < 0.15:
        req["Select"] = "COUNT"
    elif roll < 0.35 and projection == "ALL":
        expr, n = rng.choice(PROJECTIONS)
        req["ProjectionExpression"] = expr
        names.update(n)
        if rng.random() < 0.5:
            req["Select"] = "SPECIFIC_ATTRIBUTES"
    elif roll < 0.45:
        req["Select"] = "ALL_PROJECTED_ATTRIBUTES"


def random_scan(rng):
    index = rng.choice(list(INDEX))
    projection = INDEX[index][5]
    names, values = {}, {}
    req = {"TableName": TABLE, "IndexName": index}
    add_filter_projection(rng, req, names, values, projection)
    if names:
        req["ExpressionAttributeNames"] = names
    if values:
        req["ExpressionAttributeValues"] = values
    if rng.random() < 0.6:
        req["Limit"] = rng.randrange(1, 30)
    segments = rng.choice([1, 1, 2, 3, 4])
    return index, req, segments


def scan_all_segments(c, req, segments):
    pages_all, items_all = [], []
    for segment in range(segments):
        r = dict(req)
        if segments > 1:
            r.update(Segment=segment, TotalSegments=segments)
        pages, items, err = walk(c, "scan", r)
        if err:
            return None, None, err
        pages_all.append(pages)
        items_all += items
    return pages_all, items_all, None


def moto_snapshot(theirs):
    """Every item of moto's table (the oracle's state, to pick keys and values from)."""
    items, start = [], None
    while True:
        kwargs = {"TableName": TABLE}
        if start:
            kwargs["ExclusiveStartKey"] = start
        r = theirs.scan(**kwargs)
        items += r["Items"]
        start = r.get("LastEvaluatedKey")
        if not start:
            return items


# ---------------------------------------------------------------- the differential tests

def test_random_queries_answer_as_moto(endpoints):
    theirs, ours, _ = endpoints
    snapshot = moto_snapshot(theirs)
    assert len(snapshot) > 200, len(snapshot)
    rng = random.Random(SEED + 1)
    compared = {"paged": 0, "filtered": 0, "count": 0, "projected": 0, "backward": 0,
                "key_filter_refused": 0}
    for _ in range(400):
        index, req = random_query(rng, snapshot)
        o = walk(ours, "query", req)
        if keys := filtered_index_keys(index, req):
            # moto departs from DynamoDB here: DynamoDB refuses a Query filter on the queried
            # index's keys (they belong in the key condition); moto filters on them.
            assert o[2] in [("error", "ValidationException", "Filter Expression can only contain "
                             f"non-primary key attributes: Primary key attribute: {k}", 400)
                            for k in keys], (req, o[2])
            compared["key_filter_refused"] += 1
            continue
        t = walk(theirs, "query", req)
        assert_same_query(index, req, t, o, "Limit" in req)
        compared["paged"] += len(o[0]) > 1
        compared["filtered"] += "FilterExpression" in req
        compared["count"] += req.get("Select") == "COUNT"
        compared["projected"] += "ProjectionExpression" in req
        compared["backward"] += not req["ScanIndexForward"]
    # The seed exercises each feature many times.
    assert min(compared.values()) >= 20, compared


def test_legacy_key_conditions_answer_as_moto(endpoints):
    theirs, ours, _ = endpoints
    snapshot = moto_snapshot(theirs)
    rng = random.Random(SEED + 2)
    ops = {"=": "EQ", "<": "LT", "<=": "LE", ">": "GT", ">=": "GE"}
    for _ in range(60):
        index = rng.choice(["GSI1", "ByScore", "ByStamp", "ByTier"])
        _, pk, _, sk, sk_type, _, _ = INDEX[index]
        pk_value = rng.choice(key_values(snapshot, pk))
        members = [i for i in snapshot if canon(i.get(pk)) == canon(pk_value) and sk in i]
        conditions = {pk: {"AttributeValueList": [pk_value], "ComparisonOperator": "EQ"}}
        sks = key_values(members, sk)
        if sks:
            a, b = sorted([rng.choice(sks), rng.choice(sks)], key=sort_value)
            op = rng.choice(list(ops.values()) + ["BETWEEN"] + (["BEGINS_WITH"] if sk_type != "N" else []))
            args = [a, b] if op == "BETWEEN" else [a]
            conditions[sk] = {"AttributeValueList": args, "ComparisonOperator": op}
        req = {"TableName": TABLE, "IndexName": index, "KeyConditions": conditions,
               "ScanIndexForward": rng.random() < 0.5}
        if rng.random() < 0.5:
            req["Limit"] = rng.randrange(1, 5)
        assert_same_query(index, req, walk(theirs, "query", req), walk(ours, "query", req), True)


def test_random_scans_with_segments_answer_as_moto(endpoints):
    theirs, ours, _ = endpoints
    rng = random.Random(SEED + 3)
    segmented = 0
    for _ in range(80):
        index, req, segments = random_scan(rng)
        t_pages, t_items, t_err = scan_all_segments(theirs, req, segments)
        o_pages, o_items, o_err = scan_all_segments(ours, req, segments)
        assert o_err == t_err, (req, o_err, t_err)
        if t_err:
            continue
        # Scan order and segment assignment are each side's own: the union of every page of
        # every segment is compared as a multiset.
        assert sorted(canon(i) for i in o_items) == sorted(canon(i) for i in t_items), req
        scanned = lambda pages: sum(p[1] for seg in pages for p in seg)  # noqa: E731
        counted = lambda pages: sum(p[0] for seg in pages for p in seg)  # noqa: E731
        assert scanned(o_pages) == scanned(t_pages), req
        assert counted(o_pages) == counted(t_pages), req
        if segments == 1:
            # One segment: the same number of pages, each with Limit entries but the last.
            assert [p[1] for p in o_pages[0]] == [p[1] for p in t_pages[0]], req
            for o, t in zip(o_pages[0], t_pages[0]):
                assert (o[2] is None) == (t[2] is None), req
                if o[2] is not None:
                    assert set(o[2]) == set(t[2]) == set(TABLE_KEY) | set(index_key_attrs(index))
        else:
            segmented += 1
            # A partition is in one segment (as in DynamoDB): no index partition key is in
            # two segments of ours.
            owner = {}
            for seg in range(segments):
                r = dict(req, Segment=seg, TotalSegments=segments)
                r.pop("Select", None)
                r.pop("ProjectionExpression", None)
                r.pop("Limit", None)
                r.pop("FilterExpression", None)
                r.pop("ExpressionAttributeNames", None)
                r.pop("ExpressionAttributeValues", None)
                for item in walk(ours, "scan", r)[1]:
                    pk = canon(item[INDEX[index][1]])
                    assert owner.setdefault(pk, seg) == seg, (req, pk)
    assert segmented >= 20


def test_get_item_and_batch_get_item_answer_as_moto(endpoints):
    theirs, ours, _ = endpoints
    rng = random.Random(SEED + 4)
    keys = [{"PK": S(pk), "SK": S(sk)} for pk in PKS for sk in SKS] + \
        [{"PK": S("U#99"), "SK": S("PROFILE")}]
    for _ in range(150):
        req = {"TableName": TABLE, "Key": rng.choice(keys)}
        if rng.random() < 0.4:
            expr, names = rng.choice(PROJECTIONS)
            req["ProjectionExpression"] = expr
            if names:
                req["ExpressionAttributeNames"] = names
        if rng.random() < 0.3:
            req["ConsistentRead"] = True  # answered from the applied state (documented)
        o, t = call(ours, "get_item", **req), call(theirs, "get_item", **req)
        assert canon(o) == canon(t), req
    for _ in range(30):
        batch = rng.sample(keys, rng.randrange(1, 101))
        spec = {"Keys": batch}
        if rng.random() < 0.4:
            expr, names = rng.choice(PROJECTIONS)
            spec["ProjectionExpression"] = expr
            if names:
                spec["ExpressionAttributeNames"] = names
        t = call(theirs, "batch_get_item", RequestItems={TABLE: spec})
        o = call(ours, "batch_get_item", RequestItems={TABLE: spec})
        assert o["UnprocessedKeys"] == t["UnprocessedKeys"] == {}
        # The order of Responses is not defined: compared as sets.
        assert sorted(canon(i) for i in o["Responses"][TABLE]) == \
            sorted(canon(i) for i in t["Responses"][TABLE]), spec


def common(ours, theirs, path="", skip=()):
    """The fields both responses define, compared recursively; returns the paths compared."""
    compared = []
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for k in sorted(set(ours) & set(theirs)):
            if k in skip:
                continue
            compared += common(ours[k], theirs[k], f"{path}.{k}", skip)
        return compared
    assert ours == theirs, f"{path}: cdcview {ours!r}, moto {theirs!r}"
    return [path]


def test_describe_table_and_list_tables_answer_as_moto(endpoints):
    theirs, ours, _ = endpoints
    t = call(theirs, "describe_table", TableName=TABLE)["Table"]
    o = call(ours, "describe_table", TableName=TABLE)["Table"]
    # Lists whose order DynamoDB does not define are compared as sets.
    for side in (t, o):
        side["AttributeDefinitions"].sort(key=lambda a: a["AttributeName"])
        side["GlobalSecondaryIndexes"].sort(key=lambda g: g["IndexName"])
        for g in side["GlobalSecondaryIndexes"]:
            if "NonKeyAttributes" in g["Projection"]:
                g["Projection"]["NonKeyAttributes"].sort()
    # ARNs, creation times, sizes, throughput and stream fields are each side's own.
    compared = common(o, t, skip=("TableArn", "IndexArn", "CreationDateTime", "TableId",
                                  "TableSizeBytes", "IndexSizeBytes", "ProvisionedThroughput",
                                  "LatestStreamArn", "LatestStreamLabel", "StreamSpecification",
                                  "BillingModeSummary", "ItemCount", "WarmThroughput",
                                  "GlobalSecondaryIndexes"))
    assert {".TableName", ".TableStatus"} <= set(compared), compared
    assert o["KeySchema"] == t["KeySchema"]
    assert o["AttributeDefinitions"] == t["AttributeDefinitions"]
    assert [g["IndexName"] for g in o["GlobalSecondaryIndexes"]] == \
        [g["IndexName"] for g in t["GlobalSecondaryIndexes"]]
    for og, tg in zip(o["GlobalSecondaryIndexes"], t["GlobalSecondaryIndexes"]):
        assert og["KeySchema"] == tg["KeySchema"], og["IndexName"]
        assert og["Projection"] == tg["Projection"], og["IndexName"]
        assert og["IndexStatus"] == tg["IndexStatus"] == "ACTIVE", og["IndexName"]
    # Item counts: each index's is its entries (moto's describe has none: counted from moto's
    # table, the items with every key attribute of the index). The table's ItemCount is
    # DynamoDB's estimate, refreshed about every six hours; cdcview answers 0.
    snapshot = moto_snapshot(theirs)
    for g in o["GlobalSecondaryIndexes"]:
        keys = index_key_attrs(g["IndexName"])
        assert g["ItemCount"] == sum(all(k in i for k in keys) for i in snapshot), g
    assert o["ItemCount"] == 0
    assert call(ours, "list_tables") == call(theirs, "list_tables") == {"TableNames": [TABLE]}


# ---------------------------------------------------------------- errors

def error_cases():
    """(name, operation, request, DynamoDB's message). The message is None where moto answers
    DynamoDB's own message (compared with moto's), else it is DynamoDB's documented message and
    the comment says what moto answers instead (its code is still compared where it agrees)."""
    q = {"TableName": TABLE, "IndexName": "GSI1"}
    p = {":p": S("G#1")}
    return [
        ("key condition on a non-key attribute", "query",
         dict(q, KeyConditionExpression="GSI1PK = :p AND #n = :n",
              ExpressionAttributeNames={"#n": "name"},
              ExpressionAttributeValues={":p": S("G#1"), ":n": S("ann1")}), None),
        # moto: "Invalid condition in KeyConditionExpression: Multiple attribute names used in
        # one condition".
        ("missing value placeholder", "query", dict(q, KeyConditionExpression="GSI1PK = :p"),
         "Invalid KeyConditionExpression: An expression attribute value used in expression is "
         "not defined; attribute value: :p"),
        # moto: "Query condition missed key schema element: GSI1PK".
        ("missing name placeholder", "query",
         dict(q, KeyConditionExpression="#k = :p", ExpressionAttributeValues=p),
         "Invalid KeyConditionExpression: An expression attribute name used in the document "
         "path is not defined; attribute name: #k"),
        # moto answers the query.
        ("unused value", "query",
         dict(q, KeyConditionExpression="GSI1PK = :p",
              ExpressionAttributeValues={":p": S("G#1"), ":x": S("y")}),
         "Value provided in ExpressionAttributeValues unused in expressions: keys: {:x}"),
        ("unused name", "query",
         dict(q, KeyConditionExpression="GSI1PK = :p", ExpressionAttributeNames={"#x": "y"},
              ExpressionAttributeValues=p), None),
        # moto answers no items.
        ("partition key type mismatch", "query",
         dict(q, KeyConditionExpression="GSI1PK = :p", ExpressionAttributeValues={":p": N("1")}),
         "One or more parameter values were invalid: Condition parameter type does not match "
         "schema type"),
        # moto: HTTP 500.
        ("sort key type mismatch", "query",
         dict(TableName=TABLE, IndexName="ByScore", KeyConditionExpression="board = :p AND score > :s",
              ExpressionAttributeValues={":p": S("B1"), ":s": S("x")}),
         "One or more parameter values were invalid: Condition parameter type does not match "
         "schema type"),
        ("consistent read on an index", "query",
         dict(q, KeyConditionExpression="GSI1PK = :p", ConsistentRead=True,
              ExpressionAttributeValues=p), None),
        ("consistent read on an index scan", "scan", dict(q, ConsistentRead=True), None),
        # moto: "ProjectionExpression: Attribute name is a reserved keyword; ..." (no "Invalid").
        ("reserved word", "query",
         dict(q, KeyConditionExpression="GSI1PK = :p", ProjectionExpression="name",
              ExpressionAttributeValues=p),
         "Invalid ProjectionExpression: Attribute name is a reserved keyword; reserved keyword: "
         "name"),
        # moto: "Invalid condition in KeyConditionExpression: Multiple attribute names ...".
        ("syntax error", "query",
         dict(q, KeyConditionExpression="GSI1PK = ", ExpressionAttributeValues=p),
         'Invalid KeyConditionExpression: Syntax error; token: "<EOF>", near: "= "'),
        ("unknown table", "query",
         dict(q, TableName="Nope", KeyConditionExpression="GSI1PK = :p",
              ExpressionAttributeValues=p), None),
        ("unknown table get", "get_item",
         {"TableName": "Nope", "Key": {"PK": S("U#01"), "SK": S("PROFILE")}}, None),
        # moto: "Validation Exception".
        ("get with a wrong key", "get_item", {"TableName": TABLE, "Key": {"PK": S("U#01")}},
         "The provided key element does not match the schema"),
        # moto answers the query.
        ("two conditions on the sort key", "query",
         dict(q, KeyConditionExpression="GSI1PK = :p AND GSI1SK > :a AND GSI1SK < :b",
              ExpressionAttributeValues={":p": S("G#1"), ":a": S("a"), ":b": S("b")}),
         "KeyConditionExpressions must only contain one condition per key"),
        # moto: HTTP 500.
        ("OR in a key condition", "query",
         dict(q, KeyConditionExpression="GSI1PK = :p OR GSI1SK > :a",
              ExpressionAttributeValues={":p": S("G#1"), ":a": S("a")}),
         "Invalid operator used in KeyConditionExpression: OR"),
        # moto: HTTP 500.
        ("begins_with on a number sort key", "query",
         dict(TableName=TABLE, IndexName="ByScore",
              KeyConditionExpression="board = :p AND begins_with(score, :a)",
              ExpressionAttributeValues={":p": S("B1"), ":a": N("1")}),
         "Invalid KeyConditionExpression: Incorrect operand type for operator or function; "
         "operator or function: begins_with, operand type: N"),
        ("partition key condition not an equality", "query",
         dict(q, KeyConditionExpression="GSI1PK > :p", ExpressionAttributeValues=p), None),
        ("empty string key value", "query",
         dict(q, KeyConditionExpression="GSI1PK = :p", ExpressionAttributeValues={":p": S("")}),
         None),
        ("Select COUNT with a projection", "query",
         dict(q, KeyConditionExpression="GSI1PK = :p", ExpressionAttributeValues=p,
              Select="COUNT", ProjectionExpression="PK"), None),
        ("Select ALL_ATTRIBUTES on a KEYS_ONLY index", "query",
         dict(TableName=TABLE, IndexName="ByStamp", KeyConditionExpression="shelf = :p",
              ExpressionAttributeValues={":p": S("K1")}, Select="ALL_ATTRIBUTES"), None),
        # moto answers no item.
        ("get with a key of the wrong type", "get_item",
         {"TableName": TABLE, "Key": {"PK": S("U#01"), "SK": N("1")}},
         "The provided key element does not match the schema"),
        ("unknown table batch get", "batch_get_item",
         {"RequestItems": {"Nope": {"Keys": [{"PK": S("a"), "SK": S("b")}]}}}, None),
        ("segment without total", "scan", dict(q, Segment=1), None),
        ("total without segment", "scan", dict(q, TotalSegments=2), None),
        # moto leaves out the values (DynamoDB names them; this is cdcview's wording of them).
        ("segment out of range", "scan", dict(q, Segment=4, TotalSegments=4),
         "The Segment parameter is zero-based and must be less than parameter TotalSegments: "
         "Segment: 4 is not less than TotalSegments: 4"),
    ]


@pytest.mark.parametrize("case", [c[0] for c in error_cases()])
def test_errors_answer_as_dynamodb(endpoints, case):
    theirs, ours, _ = endpoints
    _, op, req, documented = next(c for c in error_cases() if c[0] == case)
    o = call(ours, op, **req)
    assert isinstance(o, tuple), (case, o)
    if documented is None:
        assert o == call(theirs, op, **req), case
    else:
        assert o == ("error", "ValidationException", documented, 400), case


def test_errors_moto_answers_differently_follow_the_documentation(endpoints):
    theirs, ours, _ = endpoints
    # Unknown index. moto: ResourceNotFoundException "Invalid index: Nope for table: Shop.
    # Available indexes are: GSI1, ...". DynamoDB: a ValidationException (the contract's).
    req = {"TableName": TABLE, "IndexName": "Nope", "KeyConditionExpression": "x = :p",
           "ExpressionAttributeValues": {":p": S("a")}}
    assert call(theirs, "query", **req)[1:3] == (
        "ResourceNotFoundException", "Invalid index: Nope for table: Shop. Available indexes "
        "are: GSI1, ByScore, ByStamp, ByMember, Flagged, ByTier")
    assert call(ours, "query", **req) == (
        "error", "ValidationException", "The table does not have the specified index: Nope", 400)
    # The base table: cdcview serves Query on its indexes only (moto answers the table).
    req = {"TableName": TABLE, "KeyConditionExpression": "PK = :p",
           "ExpressionAttributeValues": {":p": S("U#01")}}
    assert call(ours, "query", **req) == (
        "error", "ValidationException",
        "cdcview serves Query and Scan on its views (IndexName); read the table by GetItem or "
        "BatchGetItem, or query it at DynamoDB", 400)
    # A Scan of the table itself, likewise.
    assert call(ours, "scan", TableName=TABLE) == (
        "error", "ValidationException",
        "cdcview serves Query and Scan on its views (IndexName); read the table by GetItem or "
        "BatchGetItem, or query it at DynamoDB", 400)
    # A projection of an attribute a KEYS_ONLY index does not hold (moto answers the index's
    # attributes without it).
    assert call(ours, "query", TableName=TABLE, IndexName="ByStamp",
                KeyConditionExpression="shelf = :p", ExpressionAttributeValues={":p": S("K1")},
                ProjectionExpression="price") == (
        "error", "ValidationException", "One or more parameter values were invalid: Global "
        "secondary index ByStamp does not project [price]", 400)
    # Writes: the endpoint is read-only (moto writes).
    for op, kwargs, name in [
            ("put_item", {"Item": {"PK": S("U#01"), "SK": S("new")}}, "PutItem"),
            ("delete_item", {"Key": {"PK": S("U#01"), "SK": S("new")}}, "DeleteItem"),
            ("update_item", {"Key": {"PK": S("U#01"), "SK": S("new")},
                             "UpdateExpression": "SET a = :a",
                             "ExpressionAttributeValues": {":a": S("b")}}, "UpdateItem")]:
        assert call(ours, op, TableName=TABLE, **kwargs) == (
            "error", "ValidationException",
            f"cdcview's DynamoDB endpoint is read-only: {name} is not served; write to the "
            f"table itself (its stream feeds cdcview)", 400)
    assert call(ours, "batch_write_item", RequestItems={TABLE: [
        {"PutRequest": {"Item": {"PK": S("U#01"), "SK": S("new")}}}]})[1:3] == (
        "ValidationException",
        "cdcview's DynamoDB endpoint is read-only: BatchWriteItem is not served; write to the "
        "table itself (its stream feeds cdcview)")
    # DescribeTable of an unknown table: DynamoDB's message names it.
    assert call(ours, "describe_table", TableName="Nope") == (
        "error", "ResourceNotFoundException", "Requested resource not found: Table: Nope not found",
        400)
    # BatchGetItem of more than 100 keys.
    keys = [{"PK": S(pk), "SK": S(sk)} for pk in PKS[:11] for sk in SKS[:10]]
    assert call(ours, "batch_get_item", RequestItems={TABLE: {"Keys": keys[:101]}})[1:3] == (
        "ValidationException", "Too many items requested for the BatchGetItem call")
    # A malformed ExclusiveStartKey.
    r = call(ours, "query", TableName=TABLE, IndexName="GSI1", KeyConditionExpression="GSI1PK = :p",
             ExpressionAttributeValues={":p": S("G#1")}, ExclusiveStartKey={"PK": S("U#01")})
    assert r[1] == "ValidationException" and r[2].startswith("The provided starting key is invalid: "), r


def assert_same_page(ours, theirs, sk):
    """One page each: the items in order with runs of equal sort keys as sets, the rest equal."""
    assert isinstance(ours, dict), ours
    assert tie_groups(ours["Items"], sk) == tie_groups(theirs["Items"], sk)
    assert {k: v for k, v in ours.items() if k != "Items"} == \
        {k: v for k, v in theirs.items() if k != "Items"}


def test_requests_moto_fails_on_answer_as_dynamodb_documents(endpoints):
    """Requests moto answers HTTP 500 or wrongly: cdcview's answer is checked against moto's
    answer to an equivalent request, or against the items computed from moto's table."""
    theirs, ours, _ = endpoints
    q = {"TableName": TABLE, "IndexName": "GSI1", "ScanIndexForward": True}
    # A BETWEEN first in the key condition (moto: HTTP 500) answers as it does last.
    values = {":p": S("G#1"), ":a": S("2025-02-"), ":b": S("a#b9")}
    first = dict(q, KeyConditionExpression="GSI1SK BETWEEN :a AND :b AND GSI1PK = :p",
                 ExpressionAttributeValues=values)
    last = dict(q, KeyConditionExpression="GSI1PK = :p AND GSI1SK BETWEEN :a AND :b",
                ExpressionAttributeValues=values)
    want = call(theirs, "query", **last)
    assert want["Count"] > 3, want
    assert_same_page(call(ours, "query", **first), want, "GSI1SK")
    # size() of a missing attribute makes the comparison false (moto: HTTP 500).
    everything = dict(q, KeyConditionExpression="GSI1PK = :p", ExpressionAttributeValues={":p": S("G#2")})
    items = call(theirs, "query", **everything)["Items"]
    r = call(ours, "query", **dict(everything, FilterExpression="size(tags) > :n",
                                   ExpressionAttributeValues={":p": S("G#2"), ":n": N("1")}))
    expected = [i for i in items if "tags" in i and len(i["tags"]["SS"]) > 1]
    assert 0 < len(expected) < len(items)
    assert_same_page(r, {"Items": expected, "Count": len(expected), "ScannedCount": len(items)},
                     "GSI1SK")
    # List elements in a ProjectionExpression (moto: "unused" #l): the picked elements, in
    # order; an item without them has no "list".
    r = call(ours, "query", **dict(everything, ProjectionExpression="#l[1], #l[2].k, PK",
                                   ExpressionAttributeNames={"#l": "list"}))

    def project(item):
        out = {"PK": item["PK"]}
        elements = item.get("list", {}).get("L", [])
        picked = []
        if len(elements) > 1:
            picked.append(elements[1])
        if len(elements) > 2 and "k" in elements[2].get("M", {}):
            picked.append({"M": {"k": elements[2]["M"]["k"]}})
        if picked:
            out["list"] = {"L": picked}
        return out
    assert any("list" in project(i) for i in items)
    assert sorted(canon(i) for i in r["Items"]) == sorted(canon(project(i)) for i in items)
    assert (r["Count"], r["ScannedCount"], "LastEvaluatedKey" in r) == (len(items), len(items), False)


def test_a_page_ends_at_one_mebibyte_as_dynamodb_documents(endpoints):
    """1 MB pages. moto ends them at 1,000,000 bytes, DynamoDB at 1 MB: this one follows the
    documentation and compares with moto only the items of all pages."""
    theirs, ours, d = endpoints
    # Written after the other tests' snapshot: a partition of its own (flag "big").
    filler = "x" * 100_000
    for i in range(25):
        theirs.put_item(TableName=TABLE, Item={"PK": S(f"BIG#{i:02d}"), "SK": S("stamp"),
                                               "flag": S("big"), "filler": S(filler)})
    wait_caught_up(d, MotoServerView(theirs), TABLE, source="shop")
    req = {"TableName": TABLE, "IndexName": "Flagged", "KeyConditionExpression": "flag = :f",
           "ExpressionAttributeValues": {":f": S("big")}}
    o_pages, o_items, o_err = walk(ours, "query", req)
    t_pages, t_items, t_err = walk(theirs, "query", req)
    assert o_err is None and t_err is None
    assert sorted(canon(i) for i in o_items) == sorted(canon(i) for i in t_items)
    # Each item: "PK" 2 + 6, "SK" 2 + 5, "flag" 4 + 3, "filler" 6 + 100000 = 100028 bytes.
    # DynamoDB reads until it has read 1 MB: ten items are 1,000,280 bytes, the 11th reaches
    # 1,100,308 >= 1,048,576 and ends the page (moto stops before passing 1,000,000: 9 a page).
    assert [p[1] for p in o_pages] == [11, 11, 3], o_pages
    assert [p[2] is not None for p in o_pages] == [True, True, False]


class MotoServerView:
    """wait_caught_up needs .client("dynamodbstreams") of the moto server behind `ddb`."""

    def __init__(self, ddb):
        self.ddb = ddb

    def client(self, service="dynamodb"):
        import boto3
        return boto3.client(service, endpoint_url=self.ddb.meta.endpoint_url, region_name=REGION)


# ---------------------------------------------------------------- the AWS CLI on the sample

AWS = os.path.join(os.path.dirname(sys.executable), "aws")  # the venv's, tests/requirements.txt


@pytest.fixture(scope="module")
def sample(tmp_path_factory, pb, binaries):
    """cdcviewd on examples/cdcview.yaml and the bundled sample, the DynamoDB endpoint on."""
    workdir = tmp_path_factory.mktemp("sample_ddb")
    d = Daemon(workdir, config_path=False, cwd=REPO, stubs=pb,
               args=["--storage-path", str(workdir / "store"), "--grpc", "127.0.0.1:0",
                     "--metrics", "127.0.0.1:0", "--set", "server.dynamodb=127.0.0.1:0"])
    try:
        d.start()
        d.wait_finished("sample", SAMPLE)
        yield d, f"http://127.0.0.1:{dynamodb_port(d)}"
    finally:
        d.discard()


def aws(url, *args):
    """`aws dynamodb ...` as a user types it; returns its stdout (JSON) after checking rc 0."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID="any", AWS_SECRET_ACCESS_KEY="any",
               AWS_DEFAULT_REGION="us-east-1", AWS_PAGER="", AWS_CONFIG_FILE=os.devnull,
               AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    p = subprocess.run([AWS, "dynamodb", *args, "--endpoint-url", url], capture_output=True,
                       text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout


def sample_items():
    """The bundled sample's final items (PK, SK) -> item, from its stream records."""
    items = {}
    with open(SAMPLE, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            d = r["dynamodb"]
            key = (d["Keys"]["PK"]["S"], d["Keys"]["SK"]["S"])
            if r["eventName"] == "REMOVE":
                items.pop(key, None)
            else:
                items[key] = d["NewImage"]
    return items


def cli_json(value):
    """The AWS CLI's JSON output of `value` (its formatter: 4-space indent, no ASCII escaping)."""
    return json.dumps(value, indent=4, ensure_ascii=False) + "\n"


def test_aws_cli_query_as_a_user_types_it(sample):
    _, url = sample
    out = aws(url, "query", "--table-name", "App", "--index-name", "GSI1",
              "--key-condition-expression", "GSI1PK = :pk AND begins_with(GSI1SK, :day)",
              "--expression-attribute-values",
              '{":pk": {"S": "STATUS#PENDING"}, ":day": {"S": "2025-03-05T0"}}',
              "--projection-expression", "PK, SK, GSI1SK, #t", "--expression-attribute-names",
              '{"#t": "total"}')
    pending = sorted((i for i in sample_items().values()
                      if i.get("GSI1PK") == {"S": "STATUS#PENDING"}
                      and i["GSI1SK"]["S"].startswith("2025-03-05T0")),
                     key=lambda i: i["GSI1SK"]["S"])
    assert len(pending) == 7
    items = [{k: i[k] for k in sorted(("PK", "SK", "GSI1SK", "total"))} for i in pending]
    # cdcview writes an item's attributes in name order; the CLI keeps the order it reads.
    assert out == cli_json({"Items": items, "Count": 7, "ScannedCount": 7,
                            "ConsumedCapacity": None})
    assert json.loads(out)["Items"][0] == {"GSI1SK": {"S": "2025-03-05T00:55:30Z"},
                                           "PK": {"S": "USER#u056"}, "SK": {"S": "ORDER#o0334"},
                                           "total": {"N": "1777.8"}}
    # Pages of two: the CLI follows LastEvaluatedKey itself and prints the same answer.
    paged = aws(url, "query", "--table-name", "App", "--index-name", "GSI1",
                "--key-condition-expression", "GSI1PK = :pk AND begins_with(GSI1SK, :day)",
                "--expression-attribute-values",
                '{":pk": {"S": "STATUS#PENDING"}, ":day": {"S": "2025-03-05T0"}}',
                "--projection-expression", "PK, SK, GSI1SK, #t", "--expression-attribute-names",
                '{"#t": "total"}', "--page-size", "2")
    assert paged == out
    # --max-items 3 newest first, then --starting-token: the CLI's NextToken carries our
    # LastEvaluatedKey back as ExclusiveStartKey.
    args = ["query", "--table-name", "App", "--index-name", "GSI1",
            "--key-condition-expression", "GSI1PK = :pk",
            "--expression-attribute-values", '{":pk": {"S": "STATUS#PENDING"}}',
            "--no-scan-index-forward", "--projection-expression", "GSI1SK", "--max-items", "3",
            "--page-size", "3"]
    newest = sorted((i["GSI1SK"]["S"] for i in sample_items().values()
                     if i.get("GSI1PK") == {"S": "STATUS#PENDING"}), reverse=True)
    first = json.loads(aws(url, *args))
    assert [i["GSI1SK"]["S"] for i in first["Items"]] == newest[:3]
    third = next(i for i in sample_items().values()
                 if i.get("GSI1PK") == {"S": "STATUS#PENDING"} and i["GSI1SK"]["S"] == newest[2])
    token = json.loads(base64.b64decode(first["NextToken"]))
    assert token == {"ExclusiveStartKey": {k: third[k] for k in ("GSI1PK", "GSI1SK", "PK", "SK")}}
    second = json.loads(aws(url, *args, "--starting-token", first["NextToken"]))
    assert [i["GSI1SK"]["S"] for i in second["Items"]] == newest[3:6]


def test_aws_cli_describe_table_and_list_tables(sample):
    _, url = sample
    assert aws(url, "list-tables") == cli_json({"TableNames": ["App"]})
    table = json.loads(aws(url, "describe-table", "--table-name", "App"))["Table"]
    assert table["TableName"] == "App"
    assert table["KeySchema"] == [{"AttributeName": "PK", "KeyType": "HASH"},
                                  {"AttributeName": "SK", "KeyType": "RANGE"}]
    assert table["ItemCount"] == 0  # DynamoDB's is an estimate; cdcview answers 0
    indexes = {g["IndexName"]: g for g in table["GlobalSecondaryIndexes"]}
    assert indexes["GSI1"]["ItemCount"] == sum(
        "GSI1PK" in i and "GSI1SK" in i for i in sample_items().values())
    assert sorted(indexes) == sorted(["GSI1", "OpenOrders", "ByMember", "ByEntity", "ByLocation",
                                      "ByScore", "VotesByDay"])
    assert indexes["GSI1"]["KeySchema"] == [{"AttributeName": "GSI1PK", "KeyType": "HASH"},
                                            {"AttributeName": "GSI1SK", "KeyType": "RANGE"}]
    assert indexes["GSI1"]["Projection"] == {"ProjectionType": "ALL"}
    assert indexes["ByMember"]["KeySchema"] == [{"AttributeName": "SK", "KeyType": "HASH"},
                                                {"AttributeName": "PK", "KeyType": "RANGE"}]
    assert indexes["ByMember"]["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    assert indexes["OpenOrders"]["KeySchema"] == [
        {"AttributeName": "cdcview_pk", "KeyType": "HASH"},
        {"AttributeName": "open_since", "KeyType": "RANGE"}]
    assert indexes["OpenOrders"]["Projection"] == {"ProjectionType": "INCLUDE",
                                                   "NonKeyAttributes": ["status", "total"]}
    assert all(g["IndexStatus"] == "ACTIVE" for g in indexes.values())
    # An unknown table, as the CLI shows it: exit code 255 (a service error) and DynamoDB's message.
    env = dict(os.environ, AWS_ACCESS_KEY_ID="any", AWS_SECRET_ACCESS_KEY="any",
               AWS_DEFAULT_REGION="us-east-1", AWS_PAGER="")
    p = subprocess.run([AWS, "dynamodb", "describe-table", "--table-name", "Nope",
                        "--endpoint-url", url], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 255
    assert p.stderr.strip() == ("An error occurred (ResourceNotFoundException) when calling the "
                                "DescribeTable operation: Requested resource not found: Table: "
                                "Nope not found")


def test_readme_boto3_snippet(sample):
    """README's "Point your DynamoDB client at cdcview" snippet, as written there."""
    import boto3
    from boto3.dynamodb.conditions import Key

    _, url = sample
    ddb = boto3.resource("dynamodb", endpoint_url=url, region_name="us-east-1")
    app = ddb.Table("App")
    pending = app.query(IndexName="GSI1",
                        KeyConditionExpression=Key("GSI1PK").eq("STATUS#PENDING")
                        & Key("GSI1SK").begins_with("2025-03-05"))["Items"]
    want = sorted((i for i in sample_items().values()
                   if i.get("GSI1PK") == {"S": "STATUS#PENDING"}
                   and i["GSI1SK"]["S"].startswith("2025-03-05")),
                  key=lambda i: i["GSI1SK"]["S"])
    assert [(i["PK"], i["SK"]) for i in pending] == [(i["PK"]["S"], i["SK"]["S"]) for i in want]
    assert len(pending) > 7


def test_consumed_capacity_as_dynamodb_would_charge(sample):
    """ReturnConsumedCapacity, read by boto3 as a user's cost accounting would: half a unit per
    4 KB begun of what is read, a whole unit consistent, at least one; INDEXES names the GSI;
    BatchGetItem one entry per table; nothing without it."""
    import boto3
    from boto3.dynamodb.conditions import Key

    _, url = sample
    app = boto3.resource("dynamodb", endpoint_url=url, region_name="us-east-1").Table("App")
    item = next(i for i in sample_items().values() if "GSI1PK" in i)
    key = {"PK": item["PK"]["S"], "SK": item["SK"]["S"]}
    assert app.get_item(Key=key, ReturnConsumedCapacity="TOTAL")["ConsumedCapacity"] == {
        "TableName": "App", "CapacityUnits": 0.5, "ReadCapacityUnits": 0.5}
    assert app.get_item(Key=key, ConsistentRead=True, ReturnConsumedCapacity="INDEXES")[
        "ConsumedCapacity"] == {"TableName": "App", "CapacityUnits": 1.0, "ReadCapacityUnits": 1.0,
                                "Table": {"CapacityUnits": 1.0, "ReadCapacityUnits": 1.0}}
    assert "ConsumedCapacity" not in app.get_item(Key=key)
    pending = Key("GSI1PK").eq("STATUS#PENDING")
    total = app.query(IndexName="GSI1", KeyConditionExpression=pending, Select="COUNT",
                      ReturnConsumedCapacity="TOTAL")
    units = total["ConsumedCapacity"]["CapacityUnits"]
    assert units >= 0.5 and units * 2 == int(units * 2), total
    assert app.query(IndexName="GSI1", KeyConditionExpression=pending, Select="COUNT",
                     ReturnConsumedCapacity="INDEXES")["ConsumedCapacity"] == {
        "TableName": "App", "CapacityUnits": units, "ReadCapacityUnits": units,
        "GlobalSecondaryIndexes": {"GSI1": {"CapacityUnits": units, "ReadCapacityUnits": units}}}
    # One item of the partition reads less: one unit's half.
    assert app.query(IndexName="GSI1", KeyConditionExpression=pending, Limit=1,
                     ReturnConsumedCapacity="TOTAL")["ConsumedCapacity"]["CapacityUnits"] == 0.5
    batch = boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1").batch_get_item(
        RequestItems={"App": {"Keys": [{"PK": item["PK"], "SK": item["SK"]},
                                       {"PK": {"S": "none"}, "SK": {"S": "none"}}]}},
        ReturnConsumedCapacity="TOTAL")
    assert batch["ConsumedCapacity"] == [
        {"TableName": "App", "CapacityUnits": 1.0, "ReadCapacityUnits": 1.0}]
