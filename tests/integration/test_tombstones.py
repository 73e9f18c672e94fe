"""Tombstone compaction through the real daemon: steady churn (insert and remove cycles of new
items) through a followed file source, with a one-second tombstone horizon. Once warm, the
store's used pages stop growing and no tombstone outlives the horizon, while a daemon with the
default horizon (a day) fed the same stream keeps every tombstone and grows; both end with the
same views.
"""

import json
import time

from conftest import expected_position, metric, wait_for

KEYS_PER_ROUND = 1500
ROUNDS = 16
WARM_UP = 4  # rounds before the used pages must stop growing
LIVE = [f"L{i}" for i in range(20)]  # items that stay


def insert(seq, pk, day):
    return json.dumps({"eventName": "INSERT", "dynamodb": {
        "ApproximateCreationDateTime": time.time(), "Keys": {"PK": {"S": pk}},
        "NewImage": {"PK": {"S": pk}, "day": {"S": day}, "pad": {"S": "x" * 40}},
        "SequenceNumber": str(10**20 + seq)}}) + "\n"


def remove(seq, pk):
    return json.dumps({"eventName": "REMOVE", "dynamodb": {
        "ApproximateCreationDateTime": time.time(), "Keys": {"PK": {"S": pk}},
        "SequenceNumber": str(10**20 + seq)}}) + "\n"


def config(path, horizon=None):
    file = {"path": path, "follow": True}
    if horizon is not None:
        file["tombstone_horizon_seconds"] = horizon
    return {
        "sources": [{"name": "app", "table": "App", "file": file}],
        "tables": [{
            "name": "App",
            "key": {"partition": "PK"},
            "views": [{"name": "ByDay", "partition_key": {"attribute": "day", "type": "S"},
                       "sort_key": {"attribute": "PK", "type": "S"}}],
        }],
        # A short change log, so that what grows is the items database, not the log.
        "watch": {"retain_changes": 1000},
    }


def applied(d, path):
    return d.positions("app").get("") == expected_position(path)


def used_bytes(d):
    return metric(d.metrics(), "cdcview_lmdb_map_used_bytes")


def test_steady_churn_stops_growing_the_store_and_the_views_equal_a_clean_run(daemon_factory,
                                                                              tmp_path):
    stream = str(tmp_path / "stream.ndjson")
    seq = 0
    with open(stream, "w") as f:
        for pk in LIVE:
            seq += 1
            f.write(insert(seq, pk, "live"))
    compacting = daemon_factory(config(stream, horizon=1), name="compacting").start()
    keeping = daemon_factory(config(stream), name="keeping").start()

    used = {"compacting": [], "keeping": []}
    for r in range(ROUNDS):
        lines = []
        for i in range(KEYS_PER_ROUND):
            pk = f"R{r}-{i}"
            seq += 1
            lines.append(insert(seq, pk, f"D{i % 7}"))
            seq += 1
            lines.append(remove(seq, pk))
        with open(stream, "a") as f:
            f.writelines(lines)
        for name, d in (("compacting", compacting), ("keeping", keeping)):
            wait_for(f"{name} to apply round {r}", lambda d=d: applied(d, stream))
        # Past the horizon, every tombstone of the round goes.
        removed = (r + 1) * KEYS_PER_ROUND
        wait_for(f"the tombstones of round {r} to be compacted", lambda: metric(
            compacting.metrics(), "cdcview_tombstones_compacted_total", table="App") == removed,
            describe=lambda: compacting.metrics().get(("cdcview_tombstones_compacted_total",
                                                       frozenset({("table", "App")}))))
        assert metric(compacting.metrics(), "cdcview_tombstones", table="App") == 0
        for name, d in (("compacting", compacting), ("keeping", keeping)):
            used[name].append(used_bytes(d))

    assert metric(compacting.metrics(),
                  "cdcview_tombstone_compaction_step_seconds_count") >= ROUNDS
    # The default horizon keeps every tombstone, checked at most a second ago.
    wait_for("the keeping daemon's tombstone gauge", lambda: metric(
        keeping.metrics(), "cdcview_tombstones", table="App") == removed)
    assert metric(keeping.metrics(), "cdcview_tombstones_compacted_total", table="App") == 0

    # After warm-up, LMDB reuses the pages compaction frees: over the remaining rounds the
    # store grows by less than what one round's tombstones take in the keeping daemon (free
    # list bookkeeping and page splits still move its last page now and then).
    rounds = ROUNDS - 1 - WARM_UP
    kept = used["keeping"][-1] - used["keeping"][WARM_UP]
    compacted = used["compacting"][-1] - used["compacting"][WARM_UP]
    assert kept > rounds * 100 * 1024, f"the keeping daemon did not grow: {used}"
    assert compacted < kept / rounds, f"used bytes kept growing after warm-up: {used}"

    views = compacting.scan_all(["ByDay"])
    assert views == keeping.scan_all(["ByDay"])
    assert sorted(e[2]["PK"]["S"] for e in views["ByDay"]) == sorted(LIVE)
    compacting.stop()
    keeping.stop()
