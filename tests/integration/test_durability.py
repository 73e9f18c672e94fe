"""Restarts, crashes and changed view definitions: the store stays exact."""

import copy
import random
import re

import grpc
import pytest

import reference as ref
import streams
from conftest import SAMPLE, expected_position, metric, ref_tuple, wait_for

VIEWS = ref.EXAMPLE_VIEWS


def config_for(path, table=ref.EXAMPLE_TABLE, **apply):
    config = {"sources": [{"name": "src", "table": "App", "file": {"path": str(path)}}],
              "tables": [table]}
    if apply:
        config["apply"] = apply
    return config


def committed_line(d):
    """The next line number in the source's stored position, or None before the first commit."""
    position = d.positions("src").get("")
    return int(position.split(":")[1]) if position else None


def reference_scans(model, views=VIEWS):
    return {v: [ref_tuple(e) for e in model.scan(v)] for v in views}


def test_restart_applies_nothing_again(daemon_factory):
    d = daemon_factory(config_for(SAMPLE))
    d.start()
    d.wait_finished("src", SAMPLE)
    before = d.scan_all(VIEWS)
    positions = d.positions("src")
    assert metric(d.metrics(), "cdcview_events_total", result="applied", source="src") == 3134
    d.stop(expect_code=0)
    assert "SIGTERM: draining" in d.log() and "cdcviewd stopped" in d.log()

    d.start()
    d.wait_finished("src", SAMPLE)
    s = d.source("src")
    assert (s.state, s.events_applied, s.events_skipped, s.events_rejected) == ("finished", 0, 0, 0)
    assert d.positions("src") == positions == {"": expected_position(SAMPLE)}
    m = d.metrics()
    for result in ("applied", "skipped", "rejected"):
        assert metric(m, "cdcview_events_total", result=result, source="src") == 0
    for v in VIEWS:  # nothing rebuilt, nothing rewritten, same sizes
        assert metric(m, "cdcview_index_writes_total", op="put", view=v) == 0
        assert metric(m, "cdcview_index_writes_total", op="delete", view=v) == 0
    assert "rebuilding" not in d.log()
    assert d.scan_all(VIEWS) == before
    assert before == reference_scans(ref.build(ref.EXAMPLE_TABLE, ref.load_records(SAMPLE)))
    d.stop(expect_code=0)


def test_kill_9_during_ingestion_loses_and_repeats_nothing(daemon_factory, tmp_path):
    records = streams.generate(60000, seed=20250301)
    path = tmp_path / "big.ndjson"
    streams.write(path, records)
    model = ref.build(ref.EXAMPLE_TABLE, list(enumerate(records, start=1)))
    assert model.outcomes["skipped"] > 500  # the replays make the daemon skip by sequence

    # Kill -9 once the committed position passes seeded targets (10% to 90% of the file),
    # so every kill lands mid-ingestion whatever the machine's speed.
    rng = random.Random(5)
    targets = sorted(rng.sample(range(len(records) // 10, len(records) * 9 // 10), 4))
    crashed = daemon_factory(config_for(path, batch_size=256, max_delay_ms=5), name="crashed")
    seen = []
    for target in targets:
        crashed.start()
        line = wait_for(f"the committed position to pass line {target}",
                        lambda: (committed_line(crashed) or 0) >= target and committed_line(crashed),
                        interval=0.005)
        crashed.kill()
        seen.append(line)
    crashed.start()
    crashed.wait_finished("src", path)
    assert seen == sorted(seen) and seen[-1] <= len(records), seen
    final = crashed.source("src")
    # The last run resumed at or after the position seen before the last kill.
    assert final.events_applied + final.events_skipped <= len(records) - (seen[-1] - 1)

    clean = daemon_factory(config_for(path, batch_size=256, max_delay_ms=5), name="clean")
    clean.start()
    clean.wait_finished("src", path)
    s = clean.source("src")
    assert (s.events_applied, s.events_skipped, s.events_rejected) == (
        model.outcomes["applied"], model.outcomes["skipped"], 0)

    want = reference_scans(model)
    assert crashed.scan_all(VIEWS) == want
    assert clean.scan_all(VIEWS) == want
    assert crashed.positions("src") == clean.positions("src") == {"": expected_position(path)}
    m = crashed.metrics()
    for v in VIEWS:
        assert metric(m, "cdcview_view_items", view=v) == len(want[v])
    crashed.stop()
    clean.stop()


def test_kill_9_with_write_back_ends_exact_and_its_gauges_follow_the_flush(daemon_factory,
                                                                          tmp_path):
    """With write-back a kill loses the batches not flushed yet; their events are read again."""
    records = streams.generate(60000, seed=20250302)
    path = tmp_path / "big.ndjson"
    streams.write(path, records)
    model = ref.build(ref.EXAMPLE_TABLE, list(enumerate(records, start=1)))
    rng = random.Random(6)
    targets = sorted(rng.sample(range(len(records) // 10, len(records) * 9 // 10), 4))
    # Every batch is published in memory and flushed within 50 ms: with queue_capacity no
    # larger than batch_size no batch is larger than batch_size, so none goes to LMDB directly
    # (a backlog batch would where a commit is cheap; see CommitsDirectly).
    config = config_for(path, batch_size=256, max_delay_ms=5, queue_capacity=256)
    crashed = daemon_factory(config, name="crashed")
    crashed.write_config(dict(config, storage={"path": crashed.store, "map_size": "64MiB",
                                               "flush_interval_ms": 50}))
    for target in targets:
        crashed.start()
        # The visible position: with write-back it may be ahead of what LMDB holds.
        wait_for(f"the applied position to pass line {target}",
                 lambda: (committed_line(crashed) or 0) >= target, interval=0.005)
        crashed.kill()
    crashed.start()
    crashed.wait_finished("src", path)
    want = reference_scans(model)
    assert crashed.scan_all(VIEWS) == want
    assert crashed.positions("src") == {"": expected_position(path)}
    wait_for("the last batches to be flushed", lambda: metric(
        crashed.metrics(), "cdcview_store_unflushed_batches") == 0)
    m = wait_for("the view gauges to follow the flush", lambda: (lambda m: m if all(
        metric(m, "cdcview_view_items", view=v) == len(want[v]) for v in VIEWS) else None)(
            crashed.metrics()))
    assert metric(m, "cdcview_store_unflushed_bytes") == 0
    crashed.stop(expect_code=0)
    # Stopped cleanly, LMDB alone holds it all: the same views without write-back.
    crashed.write_config(config)
    crashed.start()
    crashed.wait_finished("src", path)
    assert crashed.source("src").events_applied == 0
    assert crashed.scan_all(VIEWS) == want
    crashed.stop()


def test_changed_view_definition_rebuilds_that_view(daemon_factory, pb):
    d = daemon_factory(config_for(SAMPLE))
    d.start()
    d.wait_finished("src", SAMPLE)
    old = d.scan_all(VIEWS)
    token = d.stub.Scan(pb.vs.ScanRequest(view="ByLocation", limit=3), timeout=10).next_page_token
    d.stop()

    table = copy.deepcopy(ref.EXAMPLE_TABLE)
    by_location = next(v for v in table["views"] if v["name"] == "ByLocation")
    by_location["projection"] = "KEYS_ONLY"
    table["views"] = [v for v in table["views"] if v["name"] != "ByScore"]
    d.write_config(config_for(SAMPLE, table=table))
    d.start()

    def ready():
        desc = d.stub.DescribeView(pb.vs.DescribeViewRequest(view="ByLocation"), timeout=10)
        return desc.state == pb.vs.ViewDescription.READY and desc

    desc = wait_for("ByLocation to be READY after its rebuild", ready)
    assert (desc.projection, list(desc.include)) == ("KEYS_ONLY", [])
    log = d.log()
    assert re.search(r"view ByLocation: definition changed \(fingerprint [0-9a-f]+\); "
                     r"rebuilding it from items/App", log), log
    model = ref.build(table, ref.load_records(SAMPLE))
    stored = len(model.items)  # the items store keeps tombstones of removed items too
    assert f"view ByLocation: rebuild done, {stored} of {stored} items (100%)" in log, log
    assert "view ByScore is no longer configured: dropped its database" in log
    assert len(re.findall("rebuilding", log)) == 1  # the other views are kept as they are

    views = [v for v in VIEWS if v != "ByScore"]
    got = d.scan_all(views)
    assert got == reference_scans(model, views)
    assert got["ByLocation"] != old["ByLocation"]
    assert all(set(item) == {"PK", "SK", "state", "city", "country"}
               for _, _, item in got["ByLocation"])
    for v in views:
        if v != "ByLocation":
            assert got[v] == old[v]
    s = d.source("src")
    assert (s.events_applied, s.events_skipped) == (0, 0)  # rebuilt from items, not the stream

    with pytest.raises(grpc.RpcError) as e:
        d.stub.Scan(pb.vs.ScanRequest(view="ByLocation", page_token=token), timeout=10)
    assert (e.value.code(), e.value.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "page_token was issued for another definition of this view; start again without a token")
    d.stop()


def test_view_gauges_are_right_after_a_restart(daemon_factory):
    d = daemon_factory(config_for(SAMPLE))
    d.start()
    d.wait_finished("src", SAMPLE)
    counts = {v: len(d.scan(v)[0]) for v in VIEWS}
    d.stop()
    d.start()
    d.wait_finished("src", SAMPLE)
    m = d.metrics()
    assert {v: metric(m, "cdcview_view_items", view=v) for v in VIEWS} == counts
    assert metric(m, "cdcview_lmdb_map_used_bytes") > 0
