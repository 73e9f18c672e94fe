"""Poisoned input never blocks later input: an oversized line, a sequence number no stream
gives, a file truncated or rotated under a following source. Each is dead-lettered or
followed, counted, and the records after it apply exactly once, across restarts too."""

import json
import os
import re
import subprocess

from conftest import DAEMON_BIN, expected_position, metric, wait_for


def record(n, pk, day, seq=None):
    """A DynamoDB Streams MODIFY of PK=pk with `day` (view ByDay's key) and version n."""
    image = {"PK": {"S": pk}, "day": {"S": day}, "version": {"N": str(n)}}
    return json.dumps({
        "eventID": f"e{n}", "eventName": "MODIFY",
        "dynamodb": {"ApproximateCreationDateTime": 1740787300, "Keys": {"PK": {"S": pk}},
                     "NewImage": image,
                     "SequenceNumber": seq if seq is not None else str(100000000000000000000 + n),
                     "StreamViewType": "NEW_AND_OLD_IMAGES"},
    })


def config(path, follow=False):
    return {
        "sources": [{"name": "app", "table": "App", "file": {"path": str(path), "follow": follow}}],
        "tables": [{
            "name": "App",
            "key": {"partition": "PK"},
            "views": [{"name": "ByDay", "partition_key": {"attribute": "day", "type": "S"}}],
        }],
    }


def write(path, lines, mode="w"):
    with open(path, mode, encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def get_item(d, pk):
    """The item PK=pk as {attribute: typed value}, or None."""
    av = d.stubs.av
    key = av.Item(attributes={"PK": av.AttributeValue(s=pk)})
    r = d.stub.GetItem(d.stubs.vs.GetItemRequest(table="App", key=key), timeout=10)
    if not r.found:
        return None
    out = {}
    for name, value in r.item.attributes.items():
        out[name] = {"S": value.s} if value.WhichOneof("value") == "s" else {"N": value.n}
    return out


def by_day(d, day):
    """PKs in partition `day` of ByDay."""
    req = d.stubs.vs.QueryRequest(view="ByDay", partition_key=d.stubs.av.AttributeValue(s=day))
    return sorted(e.item.attributes["PK"].s for e in d.stub.Query(req, timeout=10).entries)


def dead_letters(d):
    with open(os.path.join(d.store, "dead-letters", "app.ndjson"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def rejected_by_reason(d):
    return {dict(labels)["reason"]: value for (name, labels), value in d.metrics().items()
            if name == "cdcview_rejected_events_total"}


def counts(d):
    s = d.source("app")
    return s.events_applied, s.events_skipped, s.events_rejected


def test_an_oversized_line_is_dead_lettered_and_the_lines_after_it_apply(daemon_factory,
                                                                           tmp_path):
    # The default limit, 16 MiB: one byte over it, between good records.
    path = tmp_path / "stream.ndjson"
    huge = '{"eventName":"MODIFY","padding":"' + "x" * (16 << 20) + '"}'
    write(path, [record(1, "A", "D1"), huge, record(2, "B", "D1"), record(3, "A", "D2")])
    d = daemon_factory(config(path))
    d.start()
    d.wait_finished("app", path)
    assert by_day(d, "D1") == ["B"] and by_day(d, "D2") == ["A"]
    assert counts(d) == (3, 0, 1)
    assert rejected_by_reason(d) == {"record_too_large": 1}
    assert dead_letters(d) == [{
        "source": "app", "locator": "line 2",
        "reason": f"line 2: the line is {len(huge)} bytes, longer than file.max_line_bytes "
                  "(16777216); only its first 4096 bytes are kept. Is the file NDJSON, one "
                  "stream record per line?",
        "record": huge[:4096], "record_bytes": len(huge)}]

    # A restart resumes after everything: nothing is read, rejected or written again.
    d.stop()
    d.start()
    d.wait_finished("app", path)
    assert counts(d) == (0, 0, 0)
    assert len(dead_letters(d)) == 1
    assert d.positions("app") == {"": expected_position(path)}


def test_a_sequence_number_no_stream_gives_is_rejected_and_never_hides_later_updates(
        daemon_factory, tmp_path):
    path = tmp_path / "stream.ndjson"
    poisoned = record(2, "A", "POISON", seq="9" * 1000)
    lines = [record(1, "A", "D1"), poisoned, record(3, "A", "D2"), record(4, "A", "D3")]
    write(path, lines)
    d = daemon_factory(config(path))
    d.start()
    d.wait_finished("app", path)
    # The item is the last good update: the poisoned record neither applied nor ordered anything.
    assert get_item(d, "A") == {"PK": {"S": "A"}, "day": {"S": "D3"}, "version": {"N": "4"}}
    assert by_day(d, "POISON") == [] and by_day(d, "D3") == ["A"]
    assert counts(d) == (3, 0, 1)
    assert rejected_by_reason(d) == {"bad_record": 1}
    assert dead_letters(d) == [{
        "source": "app", "locator": "line 2",
        "reason": "line 2: dynamodb.SequenceNumber: expected at most 40 decimal digits "
                  "(DynamoDB's have 21 to 40), got 1000",
        "record": poisoned}]


def reopened(d):
    m = d.metrics()
    return tuple(metric(m, "cdcview_source_file_reopened_total", source="app", reason=r)
                 for r in ("truncated", "rotated"))


def test_a_followed_file_that_is_rotated_or_truncated_is_read_again_from_its_start(
        daemon_factory, tmp_path):
    path = tmp_path / "stream.ndjson"
    write(path, [record(1, "A", "D1")])
    d = daemon_factory(config(path, follow=True))
    d.start()
    wait_for("A applied", lambda: by_day(d, "D1") == ["A"])
    assert reopened(d) == (0, 0)

    # Rotated: a line appended just before the rename is still read from the old file, then
    # the new file from its start.
    rotated = tmp_path / "stream.ndjson.1"
    write(path, [record(2, "B", "D1")], mode="a")
    os.rename(path, rotated)
    write(path, [record(3, "C", "D1")])
    wait_for("B and C applied", lambda: by_day(d, "D1") == ["A", "B", "C"])
    wait_for("the rotation counted", lambda: reopened(d) == (0, 1))
    wait_for("the new file's position stored",
             lambda: d.positions("app") == {"": expected_position(path, generation=1)})

    # Truncated (noticed once the file is shorter than what was read), then written again:
    # read from its start.
    write(path, [])
    wait_for("the truncation counted", lambda: reopened(d) == (1, 1))
    write(path, [record(4, "D", "D1")], mode="a")
    wait_for("D applied", lambda: by_day(d, "D1") == ["A", "B", "C", "D"])
    wait_for("the position after the truncation stored",
             lambda: d.positions("app") == {"": expected_position(path, generation=2)})
    assert counts(d) == (4, 0, 0)
    assert re.search(r'source app: ".*stream\.ndjson" was rotated: read the old file \(inode '
                     r'\d+\) to its end, line 2; reading the new one \(inode \d+\) from its '
                     r'start', d.log()), d.log()[-3000:]
    assert re.search(r'source app: ".*stream\.ndjson" was truncated to \d+ bytes, below the '
                     r'\d+ read: reading it again from its start', d.log()), d.log()[-3000:]

    # A restart resumes where it was, in the file now at the path: nothing again.
    d.stop()
    write(path, [record(5, "E", "D1")], mode="a")
    d.start()
    wait_for("E applied", lambda: by_day(d, "D1") == ["A", "B", "C", "D", "E"])
    wait_for("caught up", lambda: d.source("app").state == "caught_up")
    assert counts(d) == (1, 0, 0)
    assert reopened(d) == (0, 0)


def test_a_start_failure_says_the_daemon_did_not_start(daemon_factory, tmp_path):
    path = tmp_path / "stream.ndjson"
    write(path, [record(1, "A", "D1")])
    first = daemon_factory(config(path), name="first")
    first.start()
    second = daemon_factory(dict(config(path), storage={"path": first.store}), name="second")
    proc = subprocess.run([DAEMON_BIN, "--config", second.config_path], cwd=second.workdir,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL, text=True, timeout=20, check=False)
    assert proc.returncode == 1
    # Nothing was read or served, so nothing was drained: the log says what happened instead.
    lines = proc.stdout.splitlines()
    assert len(lines) == 3, proc.stdout
    assert re.fullmatch(r"\S+ info open-files limit \(RLIMIT_NOFILE\): soft \d+.*", lines[0]), lines
    lines = lines[1:]
    assert re.fullmatch(r"\S+ info cdcviewd did not start; closed what it had opened in \d+ ms",
                        lines[0]), lines
    assert lines[1] == (
        f'cdcviewd: opening the store: another cdcviewd (pid {first.proc.pid}) holds '
        f'"{first.store}"; stop it or give this one another storage.path')
