"""Cluster reads against a real Apache Kafka broker (scripts/kafka.sh).

Three cluster members and a standalone daemon read one 6-partition topic of the seeded
workload (tests/integration/streams.py). Every view's queries (every sort operator, both
directions, paged with small limits), scans and aggregates asked of random members (their main
and fast read ports) must equal
the standalone daemon's answers byte for byte, page tokens included. kill -9 of a member makes
cluster reads fail UNAVAILABLE naming it within the deadline; after its restart, with more
events produced meanwhile, the answers are equal again.
"""

import json
import random
import socket
import time

import grpc
import pytest

import reference as ref
import streams
from conftest import metric, wait_for
from kafka_fixture import PARTITIONS, kafka, partition_of  # noqa: F401 (fixture)

MEMBERS = 3
VIEWS = ref.EXAMPLE_VIEWS
AGGREGATES = ref.EXAMPLE_AGGREGATES
LOCAL_ONLY = (("x-cdcview-local-only", "1"),)
LONG_WAIT = 240.0
OPS = ("EQ", "LT", "LE", "GT", "GE", "BETWEEN", "BEGINS_WITH")
MAX_PAGES = 25  # per paged query compared: enough pages to cross many boundaries


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def messages(records):
    out = []
    for r in records:
        keys = r["dynamodb"]["Keys"]
        pk, sk = keys["PK"]["S"], keys["SK"]["S"]
        out.append((partition_of(f"{pk}\x00{sk}"), f"{pk}|{sk}".encode(), json.dumps(r).encode()))
    return out


def config(kafka, topic, group, cluster=None):
    source = {"brokers": kafka.bootstrap, "topics": [topic], "group": group,
              "format": "dynamodb-json", "start": "earliest"}
    c = {"sources": [{"name": "app", "table": "App", "kafka": source}],
         "tables": [ref.EXAMPLE_TABLE], "apply": {"batch_size": 2000, "max_delay_ms": 5}}
    if cluster is not None:
        c["cluster"] = cluster
    return c


def own_positions(d, local_only):
    status = d.stub.GetStatus(d.stubs.vs.GetStatusRequest(), timeout=10,
                              metadata=LOCAL_ONLY if local_only else None)
    for s in status.sources:
        if s.name == "app":
            return {p.partition: p.position for p in s.positions}
    return {}


def own_state(d):
    status = d.stub.GetStatus(d.stubs.vs.GetStatusRequest(), timeout=10, metadata=LOCAL_ONLY)
    return next(s.state for s in status.sources if s.name == "app")


def wait_caught_up(kafka, topic, standalone, members):
    want = {p: str(hw) for p, hw in kafka.high_watermarks(topic).items() if hw > 0}

    def owned(ordinal):
        return {p: v for p, v in want.items() if int(p.rsplit("/", 1)[1]) % MEMBERS == ordinal}

    def done():
        if own_positions(standalone, False) != want:
            return False
        # Applied up to the end, and no longer backfilling: a member answers its part only then.
        return all(own_positions(m, True) == owned(i) and own_state(m) != "backfilling"
                   for i, m in enumerate(members))

    def describe():
        return (f"want {sorted(want.items())}; standalone {own_positions(standalone, False)}; "
                + "; ".join(f"member {i} {own_positions(m, True)}" for i, m in enumerate(members)))

    wait_for("the standalone daemon and every member to apply the topic", done, timeout=LONG_WAIT,
             interval=0.2, describe=describe)


def answer(call, request):
    """A response as comparable bytes (without `applied`, which differs by process), or the
    error's code and message."""
    try:
        r = call(request, timeout=30)
    except grpc.RpcError as e:
        return ("error", e.code(), e.details())
    if r.HasField("applied"):
        r.ClearField("applied")
    return r.SerializeToString(deterministic=True)


def copy(message):
    out = type(message)()
    out.CopyFrom(message)
    return out


def paged(call, request):
    """Up to MAX_PAGES pages of `request`, each as answer() gives it."""
    pages = []
    for _ in range(MAX_PAGES):
        try:
            r = call(request, timeout=30)
        except grpc.RpcError as e:
            pages.append(("error", e.code(), e.details()))
            return pages
        token = r.next_page_token
        if r.HasField("applied"):
            r.ClearField("applied")
        pages.append(r.SerializeToString(deterministic=True))
        if not token:
            return pages
        request.page_token = token
    return pages


def queries(vs, av, standalone):
    """Query requests over every view: a few partition keys of each, every operator on a sort
    key value the partition holds, both directions, limits 2 and 0 (the server's page)."""
    rng = random.Random(5)
    out = []
    for view in VIEWS:
        entries, _ = standalone.scan(view)
        by_pk = {}
        for e in entries:
            pk = e.partition_key.SerializeToString(deterministic=True)
            by_pk.setdefault(pk, (e.partition_key, []))[1].append(e)
        keys = sorted(by_pk)
        chosen = rng.sample(keys, min(3, len(keys)))
        if view == "VotesByDay":  # a logical key: every shard merged, across members too
            day = by_pk[chosen[0]][0].s.rsplit("#", 1)[0]
            logical = av.AttributeValue(s=day)
            by_pk[b"logical"] = (logical, by_pk[chosen[0]][1])
            chosen.append(b"logical")
        for key in chosen:
            pk, es = by_pk[key]
            sks = [e.sort_key for e in es if e.HasField("sort_key")]
            conditions = [None]
            if sks:
                mid = sks[len(sks) // 2]
                for op in OPS:
                    if op == "BEGINS_WITH" and not mid.s:
                        continue
                    c = vs.SortCondition(op=getattr(vs.SortCondition, op))
                    if op == "BEGINS_WITH":
                        c.value.s = mid.s[:max(1, len(mid.s) // 2)]
                    else:
                        c.value.CopyFrom(sks[len(sks) // 4] if op == "BETWEEN" else mid)
                    if op == "BETWEEN":
                        c.value2.CopyFrom(sks[(3 * len(sks)) // 4])
                    conditions.append(c)
            for c in conditions:
                for backward in (False, True):
                    for limit in (2, 0):
                        r = vs.QueryRequest(view=view, partition_key=pk, scan_backward=backward,
                                            limit=limit)
                        if c is not None:
                            r.sort.CopyFrom(c)
                        out.append(r)
    return out


def check_equal(pb, standalone, members, rng):
    vs, av, pb_grpc = pb.vs, pb.av, pb.grpc
    """Every read asked of a random member equals the standalone daemon's."""
    # Each member's main port and fast read port.
    channels = [grpc.insecure_channel(m.fast_addr) for m in members]
    stubs = [m.stub for m in members] + [pb_grpc.ViewServiceStub(c) for c in channels]

    def member():
        return rng.choice(stubs)

    requests = queries(vs, av, standalone)
    pages = 0
    for request in requests:
        want = paged(standalone.stub.Query, copy(request))
        assert want and not isinstance(want[0], tuple), f"{request}: {want[:1]}"
        got = paged(member().Query, copy(request))
        assert got == want, f"Query {request} differs"
        pages += len(want)
    # Every view, several keys, every operator, both directions, two page sizes.
    assert len(requests) > 300 and pages > 1500, (len(requests), pages)
    for view in VIEWS:
        for limit in (7, 0):
            request = vs.ScanRequest(view=view, limit=limit)
            want = paged(standalone.stub.Scan, vs.ScanRequest(view=view, limit=limit))
            assert paged(member().Scan, request) == want, f"Scan {view} limit {limit} differs"
    for aggregate in AGGREGATES:
        for limit in (2, 0):
            want = paged(standalone.stub.ListAggregates,
                         vs.ListAggregatesRequest(aggregate=aggregate, limit=limit))
            got = paged(member().ListAggregates,
                        vs.ListAggregatesRequest(aggregate=aggregate, limit=limit))
            assert got == want, f"ListAggregates {aggregate} limit {limit} differs"
        groups = standalone.stub.ListAggregates(vs.ListAggregatesRequest(aggregate=aggregate),
                                                timeout=30).groups
        assert groups, f"aggregate {aggregate} has no groups"
        for g in groups:
            request = vs.GetAggregateRequest(aggregate=aggregate, group=g.group)
            assert (answer(member().GetAggregate, request)
                    == answer(standalone.stub.GetAggregate, request)), f"GetAggregate {request}"
    entries, _ = standalone.scan("ByMember")
    for e in rng.sample(list(entries), min(25, len(entries))):
        key = av.Item()
        key.attributes["PK"].CopyFrom(e.item.attributes["PK"])
        key.attributes["SK"].CopyFrom(e.item.attributes["SK"])
        request = vs.GetItemRequest(table="App", key=key)
        got = answer(member().GetItem, request)
        assert got == answer(standalone.stub.GetItem, request), f"GetItem {request}"
    for c in channels:
        c.close()


def test_any_member_answers_for_the_whole_cluster(kafka, daemon_factory, pb):
    records = streams.generate(6000, seed=21, replay_every=10**9)
    first, second = records[:4000], records[4000:]
    topic = kafka.topic("cluster")
    kafka.produce(topic, messages(first))
    ports = [free_port() for _ in range(MEMBERS)]
    peers = [f"127.0.0.1:{p}" for p in ports]
    standalone = daemon_factory(config(kafka, topic, f"standalone-{topic}"), name="standalone")
    members = []
    for i in range(MEMBERS):
        c = config(kafka, topic, f"cluster-{topic}",
                   {"members": MEMBERS, "ordinal": i, "peers": peers})
        c["server"] = {"grpc": peers[i], "fast_reads": "127.0.0.1:0", "metrics": "127.0.0.1:0"}
        members.append(daemon_factory(c, name=f"member{i}"))
    standalone.start()
    for d in members:
        d.start()
    vs = pb.vs
    wait_caught_up(kafka, topic, standalone, members)
    rng = random.Random(7)
    check_equal(pb, standalone, members, rng)

    # A member killed: every cluster read fails UNAVAILABLE naming it, within the deadline.
    members[2].kill()
    request = vs.QueryRequest(view="GSI1", partition_key=pb.av.AttributeValue(s="STATUS#PENDING"))
    for d in members[:2]:
        start = time.monotonic()
        with pytest.raises(grpc.RpcError) as failed:
            d.stub.Query(request, timeout=5)
        assert time.monotonic() - start < 5.5
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        details = failed.value.details()
        assert details.startswith(f"cluster member 2 ({peers[2]}) did not answer: "), details
        assert details.endswith("; every member is needed for a whole answer: retry when it "
                                "is back"), details

    # Each of the two calls above counted its one failed part at the member it asked.
    for d in members[:2]:
        assert metric(d.metrics(), "cdcview_cluster_fanout_errors_total", peer="2",
                      code="UNAVAILABLE") == 1

    # More events while it is down; once back, the answers are whole and equal again.
    kafka.produce(topic, messages(second))
    members[2].start()
    # It backfills what it missed (its part is UNAVAILABLE until then); once caught up, the
    # others reach it again within their reconnect back-off (at most 1 s between attempts).
    wait_caught_up(kafka, topic, standalone, members)
    back = time.monotonic()

    def whole():
        try:
            for d in members:
                d.stub.Query(request, timeout=5)
            return True
        except grpc.RpcError:
            return False
    wait_for("every member to answer through the restarted one", whole, timeout=10,
             interval=0.05)
    assert time.monotonic() - back < 3
    check_equal(pb, standalone, members, rng)
    for d in members + [standalone]:
        d.stop()
