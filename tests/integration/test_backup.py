"""Online backup and restore: `cdcview backup --to DIR` copies the running store while it
ingests; a daemon started on the copy resumes from the positions it holds, and its views equal a
clean run's exactly."""

import json
import os
import shutil
import threading
import time

import pytest

import reference as ref
import streams
from conftest import expected_position, ref_tuple, run_cli, wait_for

VIEWS = ref.EXAMPLE_VIEWS


def config_for(path, follow):
    return {"sources": [{"name": "src", "table": "App",
                         "file": {"path": str(path), "follow": follow}}],
            "tables": [ref.EXAMPLE_TABLE], "apply": {"batch_size": 256, "max_delay_ms": 5}}


def with_storage(config, store, **storage):
    return dict(config, storage=dict({"path": store, "map_size": "64MiB"}, **storage))


def wait_position(d, path):
    """Until the source's committed position is past the last record of `path`."""
    want = expected_position(path)
    wait_for(f"position {want}", lambda: d.positions("src").get("") == want,
             describe=lambda: f"{d.positions('src')}, state {d.source('src').state}")


@pytest.mark.parametrize("flush_interval_ms", [0, 50], ids=["direct", "write_back"])
def test_backup_during_ingestion_restores_to_views_equal_to_a_clean_run(
        daemon_factory, tmp_path, flush_interval_ms):
    records = streams.generate(40000, seed=20261203)
    path = tmp_path / "in.ndjson"
    streams.write(path, records[:8000])
    backups = tmp_path / "backups"
    backups.mkdir()

    live = daemon_factory(config_for(path, follow=True), name="live")
    live.write_config(with_storage(config_for(path, follow=True), live.store,
                                   flush_interval_ms=flush_interval_ms,
                                   backup_dir=str(backups)))
    live.start()
    live.wait_applied("src", 1)

    # The rest of the records arrive while the backup is taken.
    def append():
        with open(path, "a", encoding="utf-8", newline="\n") as f:
            for start in range(8000, len(records), 250):
                for r in records[start:start + 250]:
                    f.write(json.dumps(r, separators=(",", ":")) + "\n")
                f.flush()
                time.sleep(0.01)

    appender = threading.Thread(target=append)
    appender.start()
    try:
        wait_for("ingestion past line 12000",
                 lambda: int(live.positions("src").get("", "0:0").split(":")[1]) > 12000)
        code, out, err = run_cli("backup", "--to", "b1", addr=live.addr)
    finally:
        appender.join()
    assert code == 0, err
    assert err == f"cdcview: backup in {backups}/b1 (data.mdb: " \
                  f"{os.path.getsize(backups / 'b1' / 'data.mdb')} bytes)\n"
    manifest = json.loads(out)
    with open(backups / "b1" / "backup.json", encoding="utf-8") as f:
        assert f.read() == out
    assert sorted(os.listdir(backups)) == ["b1"]  # no partial directory left
    assert sorted(os.listdir(backups / "b1")) == ["backup.json", "data.mdb"]
    assert manifest["store"] == live.store
    assert manifest["data_bytes"] == os.path.getsize(backups / "b1" / "data.mdb")
    [position] = manifest["positions"]
    assert (position["source"], position["partition"]) == ("src", "")
    backup_line = int(position["position"].split(":")[1])
    assert 12000 < backup_line <= len(records)  # taken during ingestion
    assert [v["name"] for v in manifest["views"]] == sorted(VIEWS)
    assert all(v["state"] == "READY" and len(v["fingerprint"]) == 16 for v in manifest["views"])
    assert "backup to \"" + str(backups / "b1") + "\" done: " in live.log()

    wait_position(live, path)
    live_views = live.scan_all(VIEWS)
    live.stop()

    # Restore: the backup's data.mdb in an empty storage.path, the same config.
    restored = daemon_factory(config_for(path, follow=False), name="restored")
    restored.write_config(with_storage(config_for(path, follow=False), restored.store,
                                       flush_interval_ms=flush_interval_ms))
    os.makedirs(restored.store)
    shutil.copyfile(backups / "b1" / "data.mdb", os.path.join(restored.store, "data.mdb"))
    restored.start()
    restored.wait_finished("src", path)
    s = restored.source("src")
    # It resumed at the backup's position: only the records after it were read again.
    assert s.events_applied + s.events_skipped + s.events_rejected == len(records) - (backup_line - 1)
    assert "rebuilding" not in restored.log()

    clean = daemon_factory(config_for(path, follow=False), name="clean")
    clean.start()
    clean.wait_finished("src", path)
    want = {v: [ref_tuple(e) for e in
                ref.build(ref.EXAMPLE_TABLE, list(enumerate(records, start=1))).scan(v)]
            for v in VIEWS}
    assert clean.scan_all(VIEWS) == want
    assert restored.scan_all(VIEWS) == want
    assert live_views == want
    restored.stop()
    clean.stop()


def test_backup_refuses_what_it_must_not_write(daemon_factory, tmp_path):
    backups = tmp_path / "backups"
    (backups / "full").mkdir(parents=True)
    (backups / "full" / "x").write_text("x")
    (backups / "empty").mkdir()
    off = daemon_factory(config_for(streams_file(tmp_path), follow=False), name="off")
    off.start()
    assert run_cli("backup", "--to", str(backups / "b"), addr=off.addr) == (
        1, "", "cdcview: FAILED_PRECONDITION: backups are off: set storage.backup_dir to the "
               "directory backups are written under\n")
    off.stop()

    d = daemon_factory(config_for(streams_file(tmp_path), follow=False), name="on")
    d.write_config(with_storage(config_for(streams_file(tmp_path), follow=False), d.store,
                                backup_dir=str(backups)))
    d.start()
    for to, want in [
            ("full", f'cdcview: FAILED_PRECONDITION: backup directory "{backups}/full" is not '
                     f'empty; give a new or empty one\n'),
            ("../elsewhere", f'cdcview: INVALID_ARGUMENT: the backup\'s directory "../elsewhere" '
                             f'is not inside storage.backup_dir ("{backups}")\n'),
            ("/tmp", f'cdcview: INVALID_ARGUMENT: the backup\'s directory "/tmp" is not inside '
                     f'storage.backup_dir ("{backups}")\n'),
            (".", f'cdcview: INVALID_ARGUMENT: the backup\'s directory "." is not inside '
                  f'storage.backup_dir ("{backups}")\n'),
            ("no/parent", f'cdcview: FAILED_PRECONDITION: cannot back up to "{backups}/no/parent": '
                          f'"{backups}/no" is not a directory; create it first\n')]:
        assert run_cli("backup", "--to", to, addr=d.addr) == (1, "", want), to
    assert sorted(os.listdir(backups)) == ["empty", "full"]
    # An empty directory is taken (replaced by the backup).
    d.wait_finished("src", streams_file(tmp_path))
    code, out, err = run_cli("backup", "--to", str(backups / "empty"), addr=d.addr)
    assert code == 0, err
    assert sorted(os.listdir(backups / "empty")) == ["backup.json", "data.mdb"]
    assert json.loads(out)["positions"][0]["position"] == expected_position(streams_file(tmp_path))
    d.stop()


def streams_file(tmp_path):
    path = tmp_path / "small.ndjson"
    if not path.exists():
        streams.write(path, streams.generate(500, seed=3))
    return path
