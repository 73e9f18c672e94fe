"""Aggregates through the real daemon: write-sharded counters, a random stream checked against
the reference model, a changed definition rebuilt across a restart, a removed one dropped."""

import copy
import re

import grpc
import pytest

import reference as ref
import streams
from conftest import metric, to_typed, wait_for

COUNTER_SHARDS = 8

TABLE = copy.deepcopy(ref.EXAMPLE_TABLE)
TABLE["aggregates"] = TABLE["aggregates"] + [
    {"name": "Counters", "filter": {"attribute": "SK", "equals": "COUNTER"},
     "group_by": {"attribute": "PK"}, "strip_shard_suffix": "#{shard}",
     "measures": ["count", {"sum": "count"}, {"max": "count"}]},
]
NAMES = [a["name"] for a in TABLE["aggregates"]]


def config_for(path, table=TABLE):
    return {"sources": [{"name": "src", "table": "App", "file": {"path": str(path)}}],
            "tables": [table]}


def counter_records(start_seq):
    """Increments of COUNTER#likes#0..7 and COUNTER#views#0..7 as MODIFY records: the counter
    is the sum over its shards. Returns (records, {counter: total})."""
    out, totals, values = [], {}, {}
    seq = start_seq
    for step in range(400):
        counter = "likes" if step % 3 else "views"
        shard = (step * 7) % COUNTER_SHARDS
        pk = f"COUNTER#{counter}#{shard}"
        old = values.get(pk)
        new = (old or 0) + 1 + step % 5
        values[pk] = new
        totals[f"COUNTER#{counter}"] = totals.get(f"COUNTER#{counter}", 0) + new - (old or 0)
        seq += 1
        body = {"Keys": {"PK": {"S": pk}, "SK": {"S": "COUNTER"}}, "SequenceNumber": str(seq),
                "StreamViewType": "NEW_AND_OLD_IMAGES",
                "NewImage": {"PK": {"S": pk}, "SK": {"S": "COUNTER"}, "count": {"N": str(new)}}}
        if old is not None:
            body["OldImage"] = {"PK": {"S": pk}, "SK": {"S": "COUNTER"}, "count": {"N": str(old)}}
        out.append({"eventID": f"{seq:032x}", "eventName": "MODIFY" if old is not None else "INSERT",
                    "eventSource": "aws:dynamodb", "awsRegion": "us-east-1", "dynamodb": body})
    return out, totals, values


def _measures(measures):
    return {m.name: (m.value.n if m.HasField("value") else None) for m in measures}


def group_to_tuple(g):
    return (to_typed(g.group), g.members, _measures(g.measures),
            [(s.group.s, s.members, _measures(s.measures)) for s in g.shards])


def list_all(d, pb, name, limit=3):
    req = pb.vs.ListAggregatesRequest(aggregate=name, limit=limit)
    out = []
    while True:
        r = d.stub.ListAggregates(req, timeout=30)
        out.extend(group_to_tuple(g) for g in r.groups)
        if not r.next_page_token:
            return out
        req.page_token = r.next_page_token


def reference(table, records, name):
    model = ref.build(table, [(i + 1, r) for i, r in enumerate(records)])
    return [(group, g.members, g.measures, [(p, s.members, s.measures) for p, s in g.shards])
            for group, g in model.aggregate(name)]


@pytest.fixture
def stream(tmp_path):
    records = streams.generate(3000, seed=55)
    counters, totals, values = counter_records(10**22)
    records += counters
    path = tmp_path / "stream.ndjson"
    streams.write(path, records)
    return path, records, totals, values


def test_sharded_counters_and_random_stream_equal_reference(daemon_factory, pb, stream):
    path, records, totals, values = stream
    d = daemon_factory(config_for(path))
    d.start()
    d.wait_finished("src", str(path))
    for name in NAMES:
        assert list_all(d, pb, name) == reference(TABLE, records, name), name
    for counter, total in totals.items():
        r = d.stub.GetAggregate(pb.vs.GetAggregateRequest(aggregate="Counters",
                                                          group=pb.av.AttributeValue(s=counter)),
                                timeout=10)
        shards = sorted((int(pk.rsplit("#", 1)[1]), v) for pk, v in values.items()
                        if pk.startswith(counter + "#"))
        assert group_to_tuple(r) == (
            {"S": counter}, COUNTER_SHARDS,
            {"count": str(COUNTER_SHARDS), "sum(count)": str(total),
             "max(count)": str(max(v for _, v in shards))},
            [(f"{counter}#{shard}", 1, {"count": "1", "sum(count)": str(v), "max(count)": str(v)})
             for shard, v in shards])
    m = d.metrics()
    assert metric(m, "cdcview_aggregate_groups", aggregate="Counters") == 2 * COUNTER_SHARDS
    # Each counter record: an INSERT adds (1 update), a MODIFY retracts and adds (2).
    inserts = 2 * COUNTER_SHARDS
    assert metric(m, "cdcview_aggregate_updates_total", aggregate="Counters") == \
        inserts + 2 * (400 - inserts)
    d.stop()


def test_changed_definition_rebuilds_and_removed_is_dropped(daemon_factory, pb, stream):
    path, records, _, _ = stream
    d = daemon_factory(config_for(path))
    d.start()
    d.wait_finished("src", str(path))
    votes = list_all(d, pb, "VotesPerDay")
    d.stop()

    table = copy.deepcopy(TABLE)
    totals = next(a for a in table["aggregates"] if a["name"] == "OrderTotals")
    totals["filter"] = [{"attribute": "type", "equals": "order"},
                        {"attribute": "status", "begins_with": "DELIVER"}]
    table["aggregates"] = [a for a in table["aggregates"] if a["name"] != "Counters"]
    d.write_config(config_for(path, table))
    d.start()

    def ready():
        try:
            return d.stub.ListAggregates(pb.vs.ListAggregatesRequest(aggregate="OrderTotals"),
                                         timeout=10)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e.details()
            assert re.fullmatch(r"aggregate OrderTotals is being rebuilt \(\d+% done\); retry in a moment",
                                e.details()), e.details()
            return None

    wait_for("OrderTotals to be rebuilt", ready)
    log = d.log()
    assert re.search(r"aggregate OrderTotals: definition changed \(fingerprint [0-9a-f]{16}\); "
                     r"rebuilding it from items/App", log), log
    assert "aggregate OrderTotals: rebuild done" in log
    assert "aggregate Counters is no longer configured: dropped its databases" in log
    assert "aggregate VotesPerDay: definition" not in log  # unchanged: kept as it was
    assert list_all(d, pb, "OrderTotals") == reference(table, records, "OrderTotals")
    assert [g[0]["S"] for g in list_all(d, pb, "OrderTotals")] == ["DELIVERED"]
    assert list_all(d, pb, "VotesPerDay") == votes
    with pytest.raises(grpc.RpcError) as e:
        d.stub.ListAggregates(pb.vs.ListAggregatesRequest(aggregate="Counters"), timeout=10)
    assert (e.value.code(), e.value.details()) == (
        grpc.StatusCode.NOT_FOUND,
        'aggregate "Counters" does not exist (aggregates: VotesPerDay, OrderTotals)')
    s = d.source("src")
    assert (s.events_applied, s.events_skipped) == (0, 0)  # rebuilt from items, not the stream
    d.stop()
