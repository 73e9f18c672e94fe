"""cdcviewd with its embedded default config (examples/cdcview.yaml) on the bundled sample.

One daemon serves the whole module (started from the repo root without --config, so the
default config path, the default source path and the flag overrides are what is tested);
the tests only read from it.
"""

import json
import math
import os
import re
import time
from decimal import Decimal

import grpc
import pytest

import reference as ref
from conftest import (REPO, SAMPLE, Daemon, entry_to_tuple, item_to_typed, metric, ref_tuple,
                      run_cli, to_typed)

VIEWS = ref.EXAMPLE_VIEWS


@pytest.fixture(scope="module")
def model():
    return ref.build(ref.EXAMPLE_TABLE, ref.load_records(SAMPLE))


@pytest.fixture(scope="module")
def sample(tmp_path_factory, pb, binaries):
    workdir = tmp_path_factory.mktemp("sample")
    d = Daemon(workdir, config_path=False, cwd=REPO, stubs=pb,
               args=["--storage-path", str(workdir / "store"), "--grpc", "127.0.0.1:0",
                     "--metrics", "127.0.0.1:0", "--set", "server.fast_reads=127.0.0.1:0"])
    try:
        d.start()
        d.wait_finished("sample", SAMPLE)
        yield d
    finally:
        d.discard()


def live_user(model):
    """The key and image of the first user profile still present at the end of the sample."""
    for (pk, sk), (_, image) in sorted(model.items.items()):
        if sk == ("S", "PROFILE") and image is not None:
            return {"PK": S(pk[1]), "SK": S("PROFILE")}, image
    raise AssertionError("no user left in the sample")


def S(text):
    return {"S": text}


def N(text):
    return {"N": text}


def av(pb, typed):
    (kind, body), = typed.items()
    return pb.av.AttributeValue(**{kind.lower(): body})


def query_pages(d, view, pk, op=None, value=None, value2=None, backward=False, limit=0):
    """Walks every page of a Query; returns (entries as tuples, page sizes)."""
    vs = d.stubs.vs
    req = vs.QueryRequest(view=view, partition_key=av(d.stubs, pk), limit=limit,
                          scan_backward=backward)
    if op is not None:
        req.sort.op = vs.SortCondition.Op.Value(op)
        req.sort.value.CopyFrom(av(d.stubs, value))
        if value2 is not None:
            req.sort.value2.CopyFrom(av(d.stubs, value2))
    entries, sizes = [], []
    for _ in range(10000):
        r = d.stub.Query(req, timeout=30)
        entries.extend(entry_to_tuple(e) for e in r.entries)
        sizes.append(len(r.entries))
        if not r.next_page_token:
            return entries, sizes
        req.page_token = r.next_page_token
    raise AssertionError("Query never ended")


def expected_sizes(n, limit):
    """Page sizes a walk must see: full pages, then the rest (one empty page for nothing)."""
    limit = limit or 1000  # 0: the server's page size
    if n == 0:
        return [0]
    return [limit] * (n // limit) + ([n % limit] if n % limit else [])


# ---------------------------------------------------------------- Scan

@pytest.mark.parametrize("limit", [0, 7])
@pytest.mark.parametrize("view", VIEWS)
def test_scan_equals_reference(sample, model, view, limit):
    entries, sizes = sample.scan(view, limit=limit)
    want = [ref_tuple(e) for e in model.scan(view)]
    got = [entry_to_tuple(e) for e in entries]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"{view} entry {i} differs"
    assert sizes == expected_sizes(len(want), limit)


def test_views_are_not_empty_and_reference_saw_every_record(model):
    # Guards the two tests above against comparing empty to empty.
    assert model.outcomes == {"applied": 3134, "skipped": 0, "rejected": 0}
    assert {v: len(model.scan(v)) for v in VIEWS} == {
        "GSI1": 889, "OpenOrders": 147, "ByMember": 1212, "ByEntity": 580, "ByLocation": 53,
        "ByScore": 96, "VotesByDay": 309}


# ---------------------------------------------------------------- Query

def test_gsi1_sharded_day_has_exactly_ann_bob_cy(sample, model):
    voters = []
    for shard in range(4):
        pk = S(f"DAY#2025-03-01#{shard}")
        got, _ = query_pages(sample, "GSI1", pk)
        assert got == [ref_tuple(e) for e in model.query("GSI1", pk)]
        voters += [item["GSI1SK"]["S"] for _, _, item in got]
    assert sorted(voters) == ["ann", "bob", "cy"]


def test_votes_by_day_merges_the_four_shards_into_ann_bob_cy(sample, model):
    day = S("DAY#2025-03-01")
    got, sizes = query_pages(sample, "VotesByDay", day)
    assert got == [ref_tuple(e) for e in model.query("VotesByDay", day)]
    # One answer, in sort-key order, from two shards; entries keep their physical keys.
    assert [(pk["S"], sk["S"]) for pk, sk, _ in got] == [
        ("DAY#2025-03-01#0", "ann"), ("DAY#2025-03-01#3", "bob"), ("DAY#2025-03-01#3", "cy")]
    assert sizes == [3]
    assert got[0][2] == {"PK": S("VOTE#ann"), "SK": S("2025-03-01"),
                         "GSI1PK": S("DAY#2025-03-01#0"), "GSI1SK": S("ann")}
    # Pages of one resume exactly across the shards, both ways.
    got, sizes = query_pages(sample, "VotesByDay", day, limit=1)
    assert [sk["S"] for _, sk, _ in got] == ["ann", "bob", "cy"] and sizes == [1, 1, 1]
    got, _ = query_pages(sample, "VotesByDay", day, backward=True, limit=2)
    assert [sk["S"] for _, sk, _ in got] == ["cy", "bob", "ann"]
    # A physical key is one partition, as before.
    got, _ = query_pages(sample, "VotesByDay", S("DAY#2025-03-01#3"))
    assert [sk["S"] for _, sk, _ in got] == ["bob", "cy"]
    # A merged token is bound to its logical key and is no single-partition token.
    vs = sample.stubs.vs
    token = sample.stub.Query(vs.QueryRequest(
        view="VotesByDay", partition_key=av(sample.stubs, day), limit=1), timeout=10).next_page_token
    for pk, message in (
            ("DAY#2025-03-02", "page_token belongs to another partition key; start again without "
                               "a token"),
            ("DAY#2025-03-01#3", 'page_token was issued for a merged query of a sharded partition '
                                 'key (4 shards with suffix "#{shard}"), not for this query; start '
                                 'again without a token')):
        assert _error(lambda: sample.stub.Query(vs.QueryRequest(
            view="VotesByDay", partition_key=av(sample.stubs, S(pk)), limit=1, page_token=token),
            timeout=10)) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_votes_by_day_every_condition(sample, model):
    voters = sorted({e.sk["S"] for e in model.scan("VotesByDay")})
    assert len(voters) > 20
    values = [S(voters[0]), S(voters[len(voters) // 2]), S(voters[-1]), S("bob"), S("m")]
    conds = _conditions(values)
    for prefix in ("a", "b", "cy", "z", ""):
        conds.append(("BEGINS_WITH", S(prefix), None))
    days = [S(f"DAY#2025-03-0{d}") for d in (1, 2, 5, 9)]
    _check_conditions(sample, model, "VotesByDay", days, conds)
    assert len(model.query("VotesByDay", days[1])) == 89


def test_describe_sharded_view_counts_entries_per_shard(sample, model):
    vs = sample.stubs.vs
    d = sample.stub.DescribeView(vs.DescribeViewRequest(view="VotesByDay"), timeout=10)
    counts = model.shard_item_counts("VotesByDay")
    assert counts == [80, 74, 81, 74]
    assert (d.shard_count, d.shard_suffix, list(d.shard_item_counts)) == (4, "#{shard}", counts)
    assert d.shard_skew == 81 / (309 / 4)
    plain = sample.stub.DescribeView(vs.DescribeViewRequest(view="GSI1"), timeout=10)
    assert (plain.shard_count, plain.shard_suffix, list(plain.shard_item_counts),
            plain.shard_skew) == (0, "", [], 0.0)


def _conditions(values):
    """Every sort condition over the given sort-key values (existing and in between)."""
    conds = [(None, None, None)]
    for v in values:
        for op in ("EQ", "LT", "LE", "GT", "GE"):
            conds.append((op, v, None))
    for lo in values:
        for hi in values:
            if ref.sort_key_of(lo) <= ref.sort_key_of(hi):
                conds.append(("BETWEEN", lo, hi))
    return conds


def _check_conditions(d, model, view, pks, conds):
    mismatches, checked = [], 0
    for pk in pks:
        for op, v1, v2 in conds:
            for backward in (False, True):
                want = [ref_tuple(e) for e in model.query(view, pk, op, v1, v2, backward)]
                for limit in (0, 1, 2, 3):
                    got, sizes = query_pages(d, view, pk, op, v1, v2, backward, limit)
                    checked += 1
                    if got != want or sizes != expected_sizes(len(want), limit):
                        mismatches.append((pk, op, v1, v2, backward, limit, len(got), len(want)))
    assert not mismatches, f"{len(mismatches)} of {checked} queries differ, first: {mismatches[:5]}"
    return checked


def test_query_by_location_every_condition(sample, model):
    values = [S("WA#Seattle"), S("CA#Oakland"), S("NY#Buffalo"), S("M"), S("WA#Spokane"),
              S("BY#Munich")]
    conds = _conditions(values)
    for prefix in ("WA", "WA#", "WA#S", "CA#", "C", "NY#Buffalo", "Z", "", "BY"):
        conds.append(("BEGINS_WITH", S(prefix), None))
    _check_conditions(sample, model, "ByLocation", [S("US"), S("DE"), S("XX")], conds)
    # The walk is only meaningful if conditions select something.
    assert len(model.query("ByLocation", S("US"), "BEGINS_WITH", S("WA#"))) == 9


def test_query_by_score_every_condition(sample, model):
    arcade = [e.sk for e in model.query("ByScore", S("arcade"))]
    values = [N("-12.5"), N("0"), N("3.25"), N("1000"), N("-0.5"), N("-1000000"),
              N("99999999"), arcade[0], arcade[len(arcade) // 2], arcade[-1]]
    _check_conditions(sample, model, "ByScore", [S("arcade"), S("puzzle")], _conditions(values))


def test_query_by_score_orders_numbers_by_value(sample):
    got, _ = query_pages(sample, "ByScore", S("arcade"), "BETWEEN", N("-12.5"), N("1E3"))
    scores = [sk["N"] for _, sk, _ in got]
    assert scores[0] == "-12.5" and "0" in scores and "3.25" in scores and scores[-1] == "1000"
    assert [Decimal(s) for s in scores] == sorted(Decimal(s) for s in scores)
    # Non-canonical input (1E3, 1000.0) means the same number as the stored "1000".
    for text in ("1E3", "1000.0", "1000"):
        got, _ = query_pages(sample, "ByScore", S("arcade"), "EQ", N(text))
        assert [item["PK"]["S"] for _, _, item in got] == ["PLAYER#dee"]


def test_open_orders_are_exactly_the_open_orders(sample, model):
    got, _ = query_pages(sample, "OpenOrders", S("OPEN"))
    open_orders = sorted(
        (image["open_since"]["S"], image["PK"]["S"], image["SK"]["S"])
        for _, image in model.items.values()
        if image and image.get("type") == S("order") and image["status"]["S"] in ("PENDING", "SHIPPED"))
    assert [(sk["S"], item["PK"]["S"], item["SK"]["S"]) for _, sk, item in got] == open_orders
    assert len(open_orders) == 147
    for _, _, item in got:
        assert set(item) == {"PK", "SK", "open_since", "status", "total"}
    assert {item["status"]["S"] for _, _, item in got} == {"PENDING", "SHIPPED"}


def test_by_entity_overloaded(sample, model):
    pending, _ = query_pages(sample, "ByEntity", S("STATUS#PENDING"))
    assert pending == [ref_tuple(e) for e in model.query("ByEntity", S("STATUS#PENDING"))]
    assert len(pending) > 10
    assert all(item["type"] == S("order") and item["status"] == S("PENDING")
               for _, _, item in pending)
    assert [sk["S"] for _, sk, _ in pending] == sorted(sk["S"] for _, sk, _ in pending)
    key, user = live_user(model)
    email = user["email"]["S"]
    got, _ = query_pages(sample, "ByEntity", S(f"EMAIL#{email}"))
    assert got == [(S(f"EMAIL#{email}"), key["PK"], user)]
    got, _ = query_pages(sample, "ByEntity", S("STATUS#DELIVERED"), "BEGINS_WITH",
                         S("2025-03-02"))
    want = model.query("ByEntity", S("STATUS#DELIVERED"), "BEGINS_WITH", S("2025-03-02"))
    assert got == [ref_tuple(e) for e in want] and want


def test_by_member_lists_the_students_of_a_class(sample, model):
    got, _ = query_pages(sample, "ByMember", S("CLASS#algebra"))
    students = sorted(pk[1] for (pk, sk), (_, image) in model.items.items()
                      if sk == ("S", "CLASS#algebra") and image is not None)
    assert [sk["S"] for _, sk, _ in got] == students and students
    assert all(item == {"PK": sk, "SK": S("CLASS#algebra")} for _, sk, item in got)


def test_get_item_found_and_not_found(sample, model):
    vs = sample.stubs.vs
    key, user = live_user(model)
    r = sample.stub.GetItem(vs.GetItemRequest(table="App", key=_item(sample, key)), timeout=10)
    assert r.found and item_to_typed(r.item) == user
    assert r.applied.entries[0].source == "sample"
    r = sample.stub.GetItem(vs.GetItemRequest(
        table="App", key=_item(sample, {"PK": S("USER#nobody"), "SK": S("PROFILE")})), timeout=10)
    assert not r.found and not r.item.attributes


def _item(d, typed):
    return d.stubs.av.Item(attributes={k: av(d.stubs, v) for k, v in typed.items()})


# ---------------------------------------------------------------- errors

def _error(call):
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value.code(), e.value.details()


def test_unknown_view(sample):
    vs = sample.stubs.vs
    code, msg = _error(lambda: sample.stub.Scan(vs.ScanRequest(view="Nope"), timeout=10))
    assert code == grpc.StatusCode.NOT_FOUND
    assert msg == ('view "Nope" does not exist (views: GSI1, OpenOrders, ByMember, ByEntity, '
                   'ByLocation, ByScore, VotesByDay)')
    code, msg2 = _error(lambda: sample.stub.Query(
        vs.QueryRequest(view="Nope", partition_key=av(sample.stubs, S("x"))), timeout=10))
    assert (code, msg2) == (grpc.StatusCode.NOT_FOUND, msg)
    code, msg3 = _error(lambda: sample.stub.DescribeView(vs.DescribeViewRequest(view="Nope"),
                                                         timeout=10))
    assert (code, msg3) == (grpc.StatusCode.NOT_FOUND, msg)


def test_unknown_table(sample):
    vs = sample.stubs.vs
    code, msg = _error(lambda: sample.stub.GetItem(vs.GetItemRequest(table="Nope"), timeout=10))
    assert (code, msg) == (grpc.StatusCode.NOT_FOUND, 'table "Nope" does not exist (tables: App)')


@pytest.mark.parametrize("view,pk,op,value,value2,message", [
    ("GSI1", N("5"), None, None, None, "partition_key: view GSI1 has a S partition key, got N"),
    ("ByScore", S("arcade"), "GT", S("5"), None, "sort.value: view ByScore has a N sort key, got S"),
    ("ByScore", S("arcade"), "BETWEEN", N("5"), S("6"),
     "sort.value2: view ByScore has a N sort key, got S"),
    ("ByScore", S("arcade"), "BETWEEN", N("10"), N("-10"),
     "sort: BETWEEN bounds are in the wrong order; value must be <= value2"),
    ("ByLocation", S("US"), "BETWEEN", S("WA"), S("CA"),
     "sort: BETWEEN bounds are in the wrong order; value must be <= value2"),
    ("ByScore", S("arcade"), "BEGINS_WITH", N("1"), None,
     "sort: begins_with needs an S or B sort key; view ByScore sorts by N"),
    ("ByMember", None, None, None, None, "partition_key is required"),
    ("ByScore", S("arcade"), "GT", N("abc"), None, 'sort.value: number "abc" is not a valid number'),
    ("ByScore", S("arcade"), "LT", N("1e400"), None,
     'sort.value: number "1e400" is out of DynamoDB\'s range (magnitude 1e-130 to 1e126)'),
    ("ByScore", S("arcade"), "EQ", N("1" * 39), None,
     f'sort.value: number "{"1" * 39}" has more than 38 significant digits'),
])
def test_query_invalid_argument(sample, view, pk, op, value, value2, message):
    vs = sample.stubs.vs
    req = vs.QueryRequest(view=view)
    if pk is not None:
        req.partition_key.CopyFrom(av(sample.stubs, pk))
    if op is not None:
        req.sort.op = vs.SortCondition.Op.Value(op)
        req.sort.value.CopyFrom(av(sample.stubs, value))
        if value2 is not None:
            req.sort.value2.CopyFrom(av(sample.stubs, value2))
    code, msg = _error(lambda: sample.stub.Query(req, timeout=10))
    assert (code, msg) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_page_token_errors(sample):
    vs, stubs = sample.stubs.vs, sample.stubs
    first = sample.stub.Query(vs.QueryRequest(view="ByScore", partition_key=av(stubs, S("arcade")),
                                              limit=2), timeout=10)
    token = first.next_page_token
    assert token

    def query(**kw):
        return lambda: sample.stub.Query(vs.QueryRequest(view="ByScore", limit=2, **kw), timeout=10)

    malformed = ("page_token is malformed; pass next_page_token from the previous response "
                 "unchanged")
    for bad in (b"x", b"garbage-token-bytes", token[:-1], token[:-1] + bytes([token[-1] ^ 1])):
        assert _error(query(partition_key=av(stubs, S("arcade")), page_token=bad)) == (
            grpc.StatusCode.INVALID_ARGUMENT, malformed)
    assert _error(query(partition_key=av(stubs, S("puzzle")), page_token=token)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "page_token belongs to another partition key; start again without a token")
    assert _error(query(partition_key=av(stubs, S("arcade")), page_token=token,
                        scan_backward=True)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "page_token was issued for the other direction; keep scan_backward as in the first request")
    other_view = sample.stub.Scan(vs.ScanRequest(view="GSI1", limit=1), timeout=10).next_page_token
    assert _error(query(partition_key=av(stubs, S("arcade")), page_token=other_view)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "page_token was issued for another definition of this view; start again without a token")
    # The good token still works after all that.
    second = sample.stub.Query(vs.QueryRequest(view="ByScore", partition_key=av(stubs, S("arcade")),
                                               limit=2, page_token=token), timeout=10)
    assert len(second.entries) == 2


# ---------------------------------------------------------------- the CLI

def test_cli_query_prints_plain_json_lines(sample, model):
    for shard in range(4):
        pk = f"DAY#2025-03-01#{shard}"
        code, out, err = run_cli("query", "--view", "GSI1", "--pk", pk, addr=sample.addr)
        want = "".join(ref.plain_item_json(e.item) + "\n" for e in model.query("GSI1", S(pk)))
        assert (code, out, err) == (0, want, "")
    code, out, _ = run_cli("query", "--view", "GSI1", "--pk", "DAY#2025-03-01#0", addr=sample.addr)
    ann = model.get_item({"PK": S("VOTE#ann"), "SK": S("2025-03-01")})
    assert out == ('{"GSI1PK":"DAY#2025-03-01#0","GSI1SK":"ann","PK":"VOTE#ann",'
                   f'"SK":"2025-03-01","choice":"{ann["choice"]["S"]}","type":"vote"}}\n')


def test_cli_query_of_a_sharded_day(sample, model):
    code, out, err = run_cli("query", "--view", "VotesByDay", "--pk", "DAY#2025-03-01",
                             addr=sample.addr)
    assert (code, err) == (0, "")
    assert out == "".join(
        f'{{"GSI1PK":"DAY#2025-03-01#{shard}","GSI1SK":"{user}","PK":"VOTE#{user}",'
        f'"SK":"2025-03-01"}}\n' for shard, user in ((0, "ann"), (3, "bob"), (3, "cy")))


def test_cli_query_numbers_limit_and_all_pages(sample, model):
    want = [ref.plain_item_json(e.item) + "\n"
            for e in model.query("ByScore", S("arcade"), "BETWEEN", N("-12.5"), N("1000"))]
    assert len(want) > 4
    args = ["query", "--view", "ByScore", "--pk", "arcade", "--between", "-12.5", "1E3"]
    code, out, err = run_cli(*args, "--limit", "2", "--all-pages", addr=sample.addr)
    assert (code, out, err) == (0, "".join(want), "")
    assert '"score":-12.5' in want[0] and '"score":1000' in want[-1]
    # A truncated page names the token of the next one; --page-token resumes there, page by
    # page to the end (the tokens are the server's, in hex).
    pages, token = [], None
    grpc_req = sample.stubs.vs.QueryRequest(
        view="ByScore", partition_key=av(sample.stubs, S("arcade")), limit=2)
    grpc_req.sort.op = sample.stubs.vs.SortCondition.Op.Value("BETWEEN")
    grpc_req.sort.value.CopyFrom(av(sample.stubs, N("-12.5")))
    grpc_req.sort.value2.CopyFrom(av(sample.stubs, N("1E3")))
    while True:
        code, out, err = run_cli(*args, "--limit", "2", *(["--page-token", token] if token else []),
                                 addr=sample.addr)
        assert code == 0
        pages.append(out)
        page = sample.stub.Query(grpc_req, timeout=10)
        if not page.next_page_token:
            assert err == ""
            break
        token = page.next_page_token.hex()
        assert err == ("cdcview: more items follow; pass --all-pages to read them all, or "
                       f"--page-token {token} for the next page\n")
        grpc_req.page_token = page.next_page_token
    assert pages == ["".join(want[i:i + 2]) for i in range(0, len(want), 2)]
    code, out, err = run_cli(*args, "--page-token", "xyz", addr=sample.addr)
    assert (code, out, err) == (
        2, "", "cdcview: --page-token xyz: expected the hex page token printed by cdcview\n")
    code, out, _ = run_cli(*args, "--limit", "2", "--all-pages", "--reverse", addr=sample.addr)
    assert (code, out) == (0, "".join(reversed(want)))
    code, out, _ = run_cli("--ddb-json", "query", "--view", "ByLocation", "--pk", "US",
                           "--begins-with", "WA#", addr=sample.addr)
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and rows == [e.item for e in model.query("ByLocation", S("US"), "BEGINS_WITH",
                                                               S("WA#"))]


def test_cli_scan_get_views_status(sample, model):
    code, out, _ = run_cli("scan", "--view", "ByLocation", "--all-pages", "--limit", "10",
                           addr=sample.addr)
    assert (code, out) == (0, "".join(ref.plain_item_json(e.item) + "\n"
                                      for e in model.scan("ByLocation")))
    key, user = live_user(model)
    code, out, err = run_cli("get", "--table", "App", "--key", f"PK={key['PK']['S']}", "--key",
                             "SK=PROFILE", addr=sample.addr)
    assert (code, out, err) == (0, ref.plain_item_json(user) + "\n", "")
    code, out, err = run_cli("get", "--table", "App", "--key", "PK=USER#nobody", "--key",
                             "SK=PROFILE", addr=sample.addr)
    assert (code, out, err) == (1, "", "cdcview: no such item\n")

    code, out, _ = run_cli("views", addr=sample.addr)
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r["name"] for r in rows] == VIEWS
    by_name = {r["name"]: r for r in rows}
    for v in VIEWS:
        assert by_name[v]["items"] == len(model.scan(v)) and by_name[v]["state"] == "READY"
        assert by_name[v]["table"] == "App"
        writes = model.writes[v]["put"] + model.writes[v]["delete"]
        assert math.isclose(by_name[v]["index_writes_per_event"], writes / 3134, rel_tol=1e-5)
    assert by_name["GSI1"]["partition_key"] == {"attribute": "GSI1PK", "type": "S"}
    assert by_name["ByLocation"]["sort_key"] == {"template": "{state}#{city}", "type": "S"}
    assert by_name["ByScore"]["sort_key"] == {"attribute": "score", "type": "N"}
    # A template of a constant is not an attribute called OPEN.
    assert by_name["OpenOrders"]["partition_key"] == {"template": "OPEN", "type": "S"}
    shards = by_name["VotesByDay"]["shards"]
    assert math.isclose(shards.pop("skew"), 81 / (309 / 4), rel_tol=1e-5)
    assert shards == {"count": 4, "suffix": "#{shard}", "items": [80, 74, 81, 74]}
    assert [v for v in VIEWS if "shards" in by_name[v]] == ["VotesByDay"]
    assert [by_name[v]["projection"] for v in VIEWS] == [
        "ALL", "INCLUDE", "KEYS_ONLY", "ALL", "ALL", "ALL", "KEYS_ONLY"]

    code, out, _ = run_cli("status", addr=sample.addr)
    status = json.loads(out)
    size = len(open(SAMPLE, "rb").read())
    assert code == 0
    assert status == {
        "source": "sample", "kind": "file", "table": "App", "state": "finished",
        "applied": 3134, "skipped": 0, "rejected": 0, "lag_seconds": 0,
        "positions": {"": f"{size}:3135:0:{os.stat(SAMPLE).st_ino}"}}


def test_cli_errors(sample):
    code, out, err = run_cli("query", "--view", "Nope", "--pk", "x", addr=sample.addr)
    assert (code, out) == (1, "")
    assert err == ('cdcview: NOT_FOUND: view "Nope" does not exist (views: GSI1, OpenOrders, '
                   'ByMember, ByEntity, ByLocation, ByScore, VotesByDay)\n')
    code, out, err = run_cli("query", "--view", "ByScore", "--pk", "arcade", "--gt", "abc",
                             addr=sample.addr)
    assert (code, out, err) == (
        1, "", 'cdcview: INVALID_ARGUMENT: sort.value: number "abc" is not a valid number\n')
    code, out, err = run_cli("query", "--view", "ByScore", "--pk", "arcade", "--begins-with", "1",
                             addr=sample.addr)
    assert (code, out, err) == (1, "", "cdcview: INVALID_ARGUMENT: sort: begins_with needs an S "
                                       "or B sort key; view ByScore sorts by N\n")
    code, out, err = run_cli("query", "--view", "GSI1", addr=sample.addr)
    assert (code, out, err) == (2, "", "cdcview: --pk is required (see cdcview --help)\n")
    code, out, err = run_cli("status", addr="127.0.0.1:1")
    assert (code, out) == (1, "")
    assert err.startswith("cdcview: UNAVAILABLE: ") and err.endswith(
        " (is cdcviewd running on 127.0.0.1:1?)\n")


def test_cli_advise_of_the_tour_shows_that_the_days_need_no_shards(sample):
    # The README tour's step: within two minutes of the replay over the recent writes, after
    # that over the whole run; either way each day's votes get their advice.
    code, out, err = run_cli("advise", "--view", "VotesByDay", addr=sample.addr)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert re.fullmatch(r"view VotesByDay: (no writes in the last one to two minutes; over the "
                        r"whole run instead: )?\d+\.\d entry writes/s over (the last )?\d+\.\d s, "
                        r"sharded 4 ways \(#\{shard\}\)", lines[0]), lines[0]
    days = [re.fullmatch(r'  not hot "(DAY#[0-9-]+)": \d+\.\d writes/s, .* over all shards; fits '
                         r'one partition \(1000 writes/s\), so sharding only multiplies its reads '
                         r'by 4 \(each Query reads 4 keys\)', line) for line in lines[1:]]
    assert all(days), lines
    assert sorted(d[1] for d in days) == [f"DAY#2025-03-0{n}" for n in range(1, 6)]


@pytest.mark.parametrize("args", [["query", "--view", "GSI1"],
                                  ["query", "--view", "GSI1", "--pk", "x", "--bogus"]])
def test_cli_bad_flags_exit_2(sample, args):
    code, out, err = run_cli(*args, addr=sample.addr)
    assert (code, out) == (2, "")
    assert err.startswith("cdcview: ") and err.endswith(" (see cdcview --help)\n")


# ---------------------------------------------------------------- metrics

def test_metrics_match_reference(sample, model):
    m = sample.metrics()
    for result, want in (("applied", 3134), ("skipped", 0), ("rejected", 0)):
        assert metric(m, "cdcview_events_total", result=result, source="sample") == want
    for v in VIEWS:
        assert metric(m, "cdcview_view_items", view=v) == len(model.scan(v)), v
        for op in ("put", "delete"):
            assert metric(m, "cdcview_index_writes_total", op=op, view=v) == model.writes[v][op], (v, op)
        assert metric(m, "cdcview_view_build_progress_ratio", view=v) == 1
    assert metric(m, "cdcview_replication_lag_seconds_count") == 3134
    assert metric(m, "cdcview_apply_batch_size_sum") == 3134
    assert metric(m, "cdcview_ttl_deletes_total", source="sample") == sum(
        1 for _, r in ref.load_records(SAMPLE)
        if r.get("userIdentity", {}).get("principalId") == "dynamodb.amazonaws.com")
    assert not [k for k in m if k[0] == "cdcview_rejected_events_total"]


def test_get_status(sample):
    s = sample.source("sample")
    size = len(open(SAMPLE, "rb").read())
    assert (s.name, s.kind, s.table, s.state, s.error) == ("sample", "file", "App", "finished", "")
    assert (s.events_applied, s.events_skipped, s.events_rejected) == (3134, 0, 0)
    assert [(p.source, p.partition, p.position) for p in s.positions] == [
        ("sample", "", f"{size}:3135:0:{os.stat(SAMPLE).st_ino}")]
    # Finished: nothing more to read, so not behind (as readiness counts it), although its
    # last batch's events were created long before they were applied (the metric says so).
    assert s.lag_seconds == 0
    assert metric(sample.metrics(), "cdcview_source_lag_seconds", source="sample") > 1e7


# ---------------------------------------------------------------- aggregates

AGGREGATES = ref.EXAMPLE_AGGREGATES


def _measures(measures):
    return {m.name: (m.value.n if m.HasField("value") else None) for m in measures}


def group_to_tuple(g):
    """An AggregateGroup as (group typed value, members, measures, [(shard, members, measures)])."""
    return (to_typed(g.group), g.members, _measures(g.measures),
            [(s.group.s, s.members, _measures(s.measures)) for s in g.shards])


def ref_group(group, g):
    return (group, g.members, g.measures,
            [(physical, s.members, s.measures) for physical, s in g.shards])


def list_aggregates(d, name, limit=0, prefix=None):
    vs = d.stubs.vs
    req = vs.ListAggregatesRequest(aggregate=name, limit=limit)
    if prefix is not None:
        req.prefix.CopyFrom(av(d.stubs, prefix))
    groups, sizes = [], []
    for _ in range(1000):
        r = d.stub.ListAggregates(req, timeout=30)
        groups.extend(group_to_tuple(g) for g in r.groups)
        sizes.append(len(r.groups))
        assert r.applied.entries, "ListAggregates carries the applied position"
        if not r.next_page_token:
            return groups, sizes
        req.page_token = r.next_page_token
    raise AssertionError("ListAggregates never ended")


def test_aggregates_are_not_empty(model):
    # Guards the comparisons below against comparing empty to empty.
    assert [len(model.aggregate(a)) for a in AGGREGATES] == [5, 4]


@pytest.mark.parametrize("limit", [0, 2])
@pytest.mark.parametrize("name", AGGREGATES)
def test_list_aggregates_equals_reference(sample, model, name, limit):
    got, sizes = list_aggregates(sample, name, limit=limit)
    want = [ref_group(group, g) for group, g in model.aggregate(name)]
    assert got == want
    assert sizes == expected_sizes(len(want), limit)


@pytest.mark.parametrize("name", AGGREGATES)
def test_get_aggregate_equals_reference_for_every_group(sample, model, name):
    for group, g in model.aggregate(name):
        r = sample.stub.GetAggregate(
            sample.stubs.vs.GetAggregateRequest(aggregate=name, group=av(sample.stubs, group)),
            timeout=30)
        assert group_to_tuple(r) == ref_group(group, g)
        assert r.aggregate == name
        assert [(e.source, e.partition) for e in r.applied.entries] == [("sample", "")]


def test_votes_per_day_merges_the_write_shards(sample):
    r = sample.stub.GetAggregate(sample.stubs.vs.GetAggregateRequest(
        aggregate="VotesPerDay", group=av(sample.stubs, S("DAY#2025-03-01"))), timeout=30)
    # ann, bob and cy, as test_gsi1_sharded_day_has_exactly_ann_bob_cy finds in GSI1.
    assert group_to_tuple(r) == ({"S": "DAY#2025-03-01"}, 3, {"count": "3"},
                                 [("DAY#2025-03-01#0", 1, {"count": "1"}),
                                  ("DAY#2025-03-01#3", 2, {"count": "2"})])
    got, _ = list_aggregates(sample, "VotesPerDay", prefix=S("DAY#2025-03-0"))
    assert [g[0]["S"] for g in got] == [f"DAY#2025-03-0{d}" for d in range(1, 6)]


def test_aggregate_errors(sample):
    vs = sample.stubs.vs
    with pytest.raises(grpc.RpcError) as e:
        sample.stub.GetAggregate(vs.GetAggregateRequest(aggregate="Nope", group=av(sample.stubs, S("x"))),
                                 timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert e.value.details() == 'aggregate "Nope" does not exist (aggregates: VotesPerDay, OrderTotals)'
    with pytest.raises(grpc.RpcError) as e:
        sample.stub.GetAggregate(vs.GetAggregateRequest(aggregate="OrderTotals", group=av(sample.stubs, N("1"))),
                                 timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == "group: aggregate OrderTotals groups by S, got N"
    # A group without members.
    r = sample.stub.GetAggregate(vs.GetAggregateRequest(aggregate="OrderTotals",
                                                        group=av(sample.stubs, S("LOST"))), timeout=10)
    assert group_to_tuple(r) == ({"S": "LOST"}, 0, {"count": "0", "sum(total)": None, "min(total)": None,
                                                    "max(total)": None, "avg(total)": None}, [])


def test_cli_aggregate_one_group_and_the_list(sample, model):
    code, out, err = run_cli("aggregate", "VotesPerDay", "DAY#2025-03-01", addr=sample.addr)
    assert (code, err) == (0, "")
    assert out == ('{"aggregate":"VotesPerDay","group":"DAY#2025-03-01","members":3,'
                   '"measures":{"count":3},"shards":['
                   '{"group":"DAY#2025-03-01#0","members":1,"measures":{"count":1}},'
                   '{"group":"DAY#2025-03-01#3","members":2,"measures":{"count":2}}]}\n')
    code, out, err = run_cli("aggregate", "OrderTotals", addr=sample.addr)
    assert (code, err) == (0, "")
    lines = [json.loads(line, parse_float=Decimal, parse_int=Decimal) for line in out.splitlines()]
    want = model.aggregate("OrderTotals")
    assert [line["group"] for line in lines] == [group["S"] for group, _ in want]
    for line, (_, g) in zip(lines, want):
        assert line["members"] == g.members
        # Exact: an average of 38 digits is a string (a double would round it), the rest numbers.
        assert line["measures"] == {
            k: (None if v is None else json.loads(ref.plain_number(v), parse_float=Decimal,
                                                  parse_int=Decimal))
            for k, v in g.measures.items()}
    all_groups = out.splitlines(keepends=True)
    code, out, err = run_cli("aggregate", "OrderTotals", "--limit", "1", addr=sample.addr)
    assert (code, out) == (0, all_groups[0])
    first = sample.stub.ListAggregates(
        sample.stubs.vs.ListAggregatesRequest(aggregate="OrderTotals", limit=1), timeout=10)
    token = first.next_page_token.hex()
    assert err == ("cdcview: more groups follow; pass --all-pages to read them all, or "
                   f"--page-token {token} for the next page\n")
    code, out, err = run_cli("aggregate", "OrderTotals", "--limit", "1", "--page-token", token,
                             addr=sample.addr)
    assert (code, out) == (0, all_groups[1])
    code, out, err = run_cli("aggregate", "Nope", addr=sample.addr)
    assert code == 1
    assert err == ('cdcview: NOT_FOUND: aggregate "Nope" does not exist '
                   '(aggregates: VotesPerDay, OrderTotals)\n')


# ---------------------------------------------------------------- the fast read port

def test_fast_read_port_answers_as_the_main_port(sample, model):
    """server.fast_reads (cdcviewd's own HTTP/2 loop) with Python's grpcio: every view's
    pages, the vote example, items and errors are the main port's."""
    assert sample.fast_addr is not None, sample.log()[-2000:]
    vs = sample.stubs.vs
    with grpc.insecure_channel(sample.fast_addr) as channel:
        fast = sample.stubs.grpc.ViewServiceStub(channel)
        for view in VIEWS:
            for limit in (7, 0):  # a small page on the loop, a large one off it
                req = vs.ScanRequest(view=view, limit=limit)
                for _ in range(30):  # 30 small pages, or every large one
                    got, want = fast.Scan(req, timeout=30), sample.stub.Scan(req, timeout=30)
                    assert got == want  # equal messages (map order on the wire may differ)
                    if not got.next_page_token:
                        break
                    req.page_token = got.next_page_token
        day = fast.Query(vs.QueryRequest(view="VotesByDay",
                                         partition_key=av(sample.stubs, S("DAY#2025-03-01"))),
                         timeout=10)
        assert [e.item.attributes["GSI1SK"].s for e in day.entries] == ["ann", "bob", "cy"]
        key, image = live_user(model)
        get = vs.GetItemRequest(table="App")
        for name, value in key.items():
            get.key.attributes[name].CopyFrom(av(sample.stubs, value))
        item = fast.GetItem(get, timeout=10)
        assert item.found and item_to_typed(item.item) == image
        assert fast.ListViews(vs.ListViewsRequest(), timeout=10) == sample.stub.ListViews(
            vs.ListViewsRequest(), timeout=10)

        code, msg = _error(lambda: fast.Query(
            vs.QueryRequest(view="Nope", partition_key=av(sample.stubs, S("x"))), timeout=10))
        assert code == grpc.StatusCode.NOT_FOUND
        assert msg == ('view "Nope" does not exist (views: GSI1, OpenOrders, ByMember, '
                       'ByEntity, ByLocation, ByScore, VotesByDay)')
        code, msg = _error(lambda: next(iter(fast.Watch(vs.WatchRequest(view="GSI1"),
                                                        timeout=10))))
        assert code == grpc.StatusCode.UNIMPLEMENTED
        assert msg == ("this port serves the unary reads of cdcview.v1.ViewService; "
                       "/cdcview.v1.ViewService/Watch is not one of them (Watch, health and "
                       "reflection are on server.grpc)")


# ---------------------------------------------------------------- over-long names
# A name longer than any view, table or aggregate can have is INVALID_ARGUMENT at once on both
# ports, without being echoed (echoed, a 70 KB name went unanswered on the fast read port, and
# one over 16 KB reached main-port clients as RESOURCE_EXHAUSTED); an unknown name is quoted
# only in part.

VIEW_LIST = "views: GSI1, OpenOrders, ByMember, ByEntity, ByLocation, ByScore, VotesByDay"


@pytest.fixture(scope="module")
def ports(sample):
    """The main port's stub and the fast read port's, by name."""
    assert sample.fast_addr is not None, sample.log()[-2000:]
    with grpc.insecure_channel(sample.fast_addr) as channel:
        yield {"main": sample.stub, "fast": sample.stubs.grpc.ViewServiceStub(channel)}


def _timed_error(call):
    """(code, details, seconds taken) of a call that must fail."""
    start = time.monotonic()
    code, details = _error(call)
    return code, details, time.monotonic() - start


def _too_long(kind, size, known):
    return (grpc.StatusCode.INVALID_ARGUMENT,
            f"{kind} name of {size} bytes is longer than any {kind} can have (at most 1024 "
            f"bytes); {known}")


@pytest.mark.parametrize("port", ["main", "fast"])
def test_a_70_kb_view_name_is_invalid_at_once(sample, ports, port):
    vs = sample.stubs.vs
    stub = ports[port]
    name = "v" * 70000
    for call in (lambda: stub.Query(vs.QueryRequest(view=name), timeout=10),
                 lambda: stub.Scan(vs.ScanRequest(view=name), timeout=10),
                 lambda: stub.DescribeView(vs.DescribeViewRequest(view=name), timeout=10)):
        code, details, took = _timed_error(call)
        assert (code, details) == _too_long("view", 70000, VIEW_LIST)
        assert took < 2


@pytest.mark.parametrize("port", ["main", "fast"])
def test_70_kb_table_and_aggregate_names_are_invalid_at_once(sample, ports, port):
    vs = sample.stubs.vs
    stub = ports[port]
    code, details, took = _timed_error(
        lambda: stub.GetItem(vs.GetItemRequest(table="t" * 70000), timeout=10))
    assert (code, details) == _too_long("table", 70000, "tables: App")
    assert took < 2
    code, details, took = _timed_error(lambda: stub.GetAggregate(
        vs.GetAggregateRequest(aggregate="a" * 70000), timeout=10))
    assert (code, details) == _too_long("aggregate", 70000,
                                        "aggregates: VotesPerDay, OrderTotals")
    assert took < 2


def test_a_20_kb_name_on_the_main_port_is_invalid_not_resource_exhausted(sample):
    vs = sample.stubs.vs
    code, details = _error(
        lambda: sample.stub.Query(vs.QueryRequest(view="v" * 20000), timeout=10))
    assert (code, details) == _too_long("view", 20000, VIEW_LIST)


@pytest.mark.parametrize("port", ["main", "fast"])
def test_an_unknown_name_is_quoted_in_part(sample, ports, port):
    vs = sample.stubs.vs
    code, details = _error(
        lambda: ports[port].Query(vs.QueryRequest(view="v" * 1024), timeout=10))
    assert code == grpc.StatusCode.NOT_FOUND
    assert details == f'view "{"v" * 64}..." (1024 bytes) does not exist ({VIEW_LIST})'


def test_cli_queries_the_fast_read_port(sample, model):
    pk = "DAY#2025-03-01#0"
    code, out, err = run_cli("query", "--view", "GSI1", "--pk", pk, addr=sample.fast_addr)
    want = "".join(ref.plain_item_json(e.item) + "\n" for e in model.query("GSI1", S(pk)))
    assert (code, out, err) == (0, want, "")
