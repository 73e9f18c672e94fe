"""Bad records, keys over DynamoDB's limits and bad configs: rejected precisely, counted, the rest applies."""

import json
import os
import subprocess

import pytest

import reference as ref
from conftest import DAEMON_BIN, SAMPLE, metric, ref_tuple

VIEWS = ref.EXAMPLE_VIEWS


def sample_lines(count):
    with open(SAMPLE, encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(count)]


def changed(line, edit):
    record = json.loads(line)
    edit(record)
    return json.dumps(record)


def vote(user, gsi1pk, seq, sk="2025-03-01"):
    image = {"PK": {"S": f"VOTE#{user}"}, "SK": {"S": sk}, "type": {"S": "vote"},
             "GSI1PK": {"S": gsi1pk}, "GSI1SK": {"S": user}, "choice": {"S": "A"}}
    return json.dumps({"eventName": "INSERT", "dynamodb": {
        "ApproximateCreationDateTime": 1740787300, "Keys": {"PK": image["PK"], "SK": image["SK"]},
        "NewImage": image, "SequenceNumber": str(seq), "StreamViewType": "NEW_AND_OLD_IMAGES"}})


def run_stream(daemon_factory, tmp_path, lines):
    path = tmp_path / "stream.ndjson"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    d = daemon_factory({"sources": [{"name": "src", "table": "App", "file": {"path": str(path)}}],
                        "tables": [ref.EXAMPLE_TABLE]})
    d.start()
    d.wait_finished("src", path)
    return d


def dead_letters(d):
    path = os.path.join(d.store, "dead-letters", "src.ndjson")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def check_outcome(d, lines, model, bad):
    """Views exact, one dead letter per bad line, counters and metrics per reason."""
    assert d.scan_all(VIEWS) == {v: [ref_tuple(e) for e in model.scan(v)] for v in VIEWS}
    assert dead_letters(d) == [
        {"source": "src", "locator": f"line {n}", "reason": f"line {n}: {message}",
         "record": lines[n - 1]} for n, (_, message) in sorted(bad.items())]
    s = d.source("src")
    applied = model.outcomes["applied"]
    assert (s.events_applied, s.events_skipped, s.events_rejected) == (
        applied, model.outcomes["skipped"], len(bad))
    m = d.metrics()
    assert metric(m, "cdcview_events_total", result="rejected", source="src") == len(bad)
    assert metric(m, "cdcview_events_total", result="applied", source="src") == applied
    reasons = {}
    for reason, _ in bad.values():
        reasons[reason] = reasons.get(reason, 0) + 1
    got = {dict(labels)["reason"]: value for (name, labels), value in m.items()
           if name == "cdcview_rejected_events_total"}
    assert got == reasons


def test_bad_records_are_dead_lettered_and_the_rest_applies(daemon_factory, tmp_path):
    good = sample_lines(40)
    bad_lines = {
        "truncated": (good[0][:57], "malformed_json",
                      "malformed JSON: JSON document ended early in the middle of an object or array."),
        "number": (changed(good[1], lambda r: r["dynamodb"]["NewImage"].update(x={"N": 5})),
                   "bad_record", "dynamodb.NewImage.x: N value must be a string, got number"),
        "event": (changed(good[2], lambda r: r.update(eventName="UPSERT")), "bad_record",
                  'eventName: expected INSERT, MODIFY or REMOVE, got "UPSERT"'),
        "nokeys": (changed(good[3], lambda r: r["dynamodb"].pop("Keys")), "bad_record",
                   "dynamodb.Keys: is required"),
        "array": ("[1,2]", "bad_record", "record: expected a JSON object, got array"),
        "noimage": (changed(good[4], lambda r: r["dynamodb"].pop("NewImage")), "bad_record",
                    "dynamodb.NewImage: is required for INSERT"),
        "seq": (changed(good[5], lambda r: r["dynamodb"].update(SequenceNumber="12a")),
                "bad_record", 'dynamodb.SequenceNumber: expected decimal digits, got "12a"'),
        # Rejected by the writer (the reference model must agree):
        "conflict": (changed(good[6], lambda r: r["dynamodb"]["NewImage"].update(PK={"S": "X"})),
                     "bad_record", "NewImage attribute PK differs from the record's Keys"),
        "keytype": (changed(good[7], lambda r: (r["dynamodb"]["Keys"].update(SK={"N": "1"}),
                                                r["dynamodb"]["NewImage"].update(SK={"N": "1"}))),
                    "bad_key", "table App: key attribute SK must be S, got N"),
        "longpk": (vote("p" * 2044, "DAY#x", 1), "bad_key",
                   "table App: partition key PK is 2049 bytes, over DynamoDB's limit of 2048 bytes"),
    }
    lines, bad, decoded_bad = [], {}, set()
    for i, (name, (text, reason, message)) in enumerate(bad_lines.items()):
        lines.append(good[10 + i])
        lines.append(text)
        bad[len(lines)] = (reason, message)
        if name in ("conflict", "keytype", "longpk"):
            decoded_bad.add(len(lines))
        if i % 3 == 0:
            lines += ["", "  \t "]  # blank lines: not records at all
    lines += good[20:40]

    records = [(n, json.loads(t)) for n, t in enumerate(lines, 1)
               if t.strip() and (n not in bad or n in decoded_bad)]
    model = ref.build(ref.EXAMPLE_TABLE, records)
    assert [(n, r, m) for n, r, m in model.rejections] == [
        (n, *bad[n]) for n in sorted(decoded_bad)]
    assert model.outcomes == {"applied": 30, "skipped": 0, "rejected": 3}

    d = run_stream(daemon_factory, tmp_path, lines)
    check_outcome(d, lines, model, bad)
    d.stop()


def test_view_key_over_dynamodbs_limits_is_rejected_naming_view_and_size(daemon_factory, tmp_path):
    good = sample_lines(30)
    store = {"PK": {"S": "STORE#long"}, "SK": {"S": "LOCATION"}, "type": {"S": "store"},
             "country": {"S": "US"}, "state": {"S": "W" * 2041}, "city": {"S": "Seattle"}}
    long_state = json.dumps({"eventName": "INSERT", "dynamodb": {
        "Keys": {"PK": store["PK"], "SK": store["SK"]}, "NewImage": store,
        "SequenceNumber": "5"}})
    lines = good[:10] + [
        vote("zed", "DAY#2025-03-09#1", 100),        # 11: in GSI1
        vote("zed", "X" * 2049, 101),                 # 12: GSI1PK too long: rejected whole
        vote("amy", "Y" * 2048, 102),                 # 13: fits: a 2,048-byte index key
        long_state,                                   # 14: ByLocation's sort key too long
        vote("zed", "DAY#2025-03-09#2", 103),         # 15: moves zed's GSI1 entry
    ] + good[10:30]
    model = ref.build(ref.EXAMPLE_TABLE, [(n, json.loads(t)) for n, t in enumerate(lines, 1)])
    sizes = {n: msg for n, _, msg in model.rejections}
    assert sorted(sizes) == [12, 14]
    assert sizes[12] == "view GSI1: partition key is 2049 bytes, over DynamoDB's limit of 2048 bytes"
    assert sizes[14] == ("view ByLocation: sort key is 2049 bytes, over DynamoDB's limit of "
                         "2048 bytes")
    bad = {n: ("key_too_large", msg) for n, msg in sizes.items()}

    d = run_stream(daemon_factory, tmp_path, lines)
    check_outcome(d, lines, model, bad)
    gsi1 = d.scan_all(["GSI1"])["GSI1"]
    zed = [item for _, _, item in gsi1 if item["GSI1SK"] == {"S": "zed"}]
    assert [item["GSI1PK"]["S"] for item in zed] == ["DAY#2025-03-09#2"]
    assert [pk["S"] for pk, _, item in gsi1 if item["GSI1SK"] == {"S": "amy"}] == ["Y" * 2048]
    d.stop()


def test_storage_path_flag_moves_default_dead_letters(daemon_factory, tmp_path):
    stream = tmp_path / "stream.ndjson"
    stream.write_text("not json\n", encoding="utf-8")
    flag_store = tmp_path / "flag-store"
    d = daemon_factory({"sources": [{"name": "src", "table": "App", "file": {"path": str(stream)}}],
                        "tables": [ref.EXAMPLE_TABLE]},
                       args=["--storage-path", str(flag_store)])
    d.start()
    d.wait_finished("src", stream)
    d.stop()
    assert os.path.exists(flag_store / "dead-letters" / "src.ndjson")
    assert not os.path.exists(os.path.join(d.store, "dead-letters"))


CONFIG_ERRORS = [
    ("""tables:
  - name: App
    key: { partition: PK, sort: SK }
    views:
      - name: GSI1
        partition_key: { attribute: GSI1PK, type: S }
        projecton: ALL
""", '7: tables[0].views[0]: unknown field "projecton" (expected one of name, partition_key, '
     'sort_key, rules, inverted, projection, filter, shards)'),
    ("""tables:
  - name: App
    key: { partition: PK, sort: SK }
    views:
      - name: ByScore
        partition_key: { attribute: board, type: S }
        sort_key: { attribute: score, type: X }
""", '7: tables[0].views[0].sort_key.type: expected one of S, N, B, got "X"'),
    ("""sources:
  - name: s
    table: Orders
    file: { path: x.ndjson }
tables:
  - name: App
    key: { partition: PK }
""", '3: sources[0].table: source "s" names table "Orders", which is not defined (tables: App)'),
    ("""tables:
  - name: App
    key: { partition: PK }
    views:
      - name: Inv
        inverted: true
""", '6: tables[0].views[0].inverted: table "App" has no sort key, so there is nothing to invert'),
    ("""tables:
  - name: App
    key: { partition: PK, sort: SK }
    views:
      - name: V
        rules:
          - when: { attribute: type, equals: a }
            partition_key: { template: "A#{x}" }
            sort_key: { attribute: n, type: N }
          - partition_key: { template: "B#{y}" }
            sort_key: { template: "{z}" }
""", "11: tables[0].views[0].rules[1].sort_key: type S differs from rules[0].sort_key (type N); "
     "all rules of a view share one key schema"),
    ("""tables:
  - name: App
    key: { partition: PK, sort: SK
""", '3: invalid YAML: end of map flow not found (the "{" on this line is never closed)'),
    ("""storage:
  path /srv/cdcview
  map_size: 4GiB
tables: [ { name: App, key: { partition: PK } } ]
""", '2: invalid YAML: illegal map value (a key on this line has no ":" after it)'),
    ("""storage:
  max_map_size: 1000TiB
tables: [ { name: App, key: { partition: PK } } ]
""", "2: storage.max_map_size: 1000TiB is larger than this system allows (at most 64TiB: LMDB "
     "reserves the whole map in the process's address space, 128 TiB on 64-bit Linux)"),
    ("""storage:
  map_size: 1000TiB
  max_map_size: 1000TiB
tables: [ { name: App, key: { partition: PK } } ]
""", "2: storage.map_size: 1000TiB is larger than this system allows (at most 64TiB: LMDB "
     "reserves the whole map in the process's address space, 128 TiB on 64-bit Linux)"),
    ("""apply:
  queue_capacity: 4000000000
tables: [ { name: App, key: { partition: PK } } ]
""", '2: apply.queue_capacity: expected a whole number from 1 to 1048576, got "4000000000"'),
]


@pytest.mark.parametrize("text,message", CONFIG_ERRORS)
def test_bad_config_exits_2_naming_file_line_and_field(binaries, tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    p = subprocess.run([DAEMON_BIN, "--config", str(path), "--storage-path", str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=30)
    assert (p.returncode, p.stdout, p.stderr) == (2, "", f"cdcviewd: {path}:{message}\n")
    assert not os.path.exists(tmp_path / "s")


def test_missing_config_file_exits_2(binaries, tmp_path):
    path = tmp_path / "absent.yaml"
    p = subprocess.run([DAEMON_BIN, "--config", str(path)], capture_output=True, text=True,
                       timeout=30)
    assert (p.returncode, p.stderr) == (
        2, f'cdcviewd: cannot read config file "{path}": No such file or directory\n')
