"""A store whose disk fills up: the growth that cannot get its disk fails like a full map,
the writer retries, health says NOT_SERVING, and once there is room again ingestion resumes
with nothing lost. The full disk is a file size limit (RLIMIT_FSIZE, soft only, so that the
test lifts it from outside the running process as an operator frees space)."""

import os
import resource
import subprocess

import pytest

import reference as ref
import streams
from conftest import expected_position, health, metric, ref_tuple, wait_for

VIEWS = ref.EXAMPLE_VIEWS
LIMIT = 4 << 20  # the map grows 1, 2, 4 MiB; the growth to 8 MiB crosses the limit


def wait_stopped_for_want_of_disk(d, error):
    """Until the writer failed with `error`: logged, the source's error, the views' health
    NOT_SERVING, cdcview_store_disk_full 1."""
    wait_for("the writer to fail for want of disk", lambda: error in d.log(),
             describe=lambda: d.log()[-2000:])
    s = d.source("src")
    assert (s.state, s.error) == ("error", error)
    wait_for("the view health to say NOT_SERVING",
             lambda: health(d.channel, "cdcview.view.GSI1") == 2)
    wait_for("cdcview_store_disk_full to be 1",
             lambda: metric(d.metrics(), "cdcview_store_disk_full") == 1)


@pytest.mark.parametrize("write_map", [True, False], ids=["write_map", "pwrite"])
def test_a_full_disk_stops_the_writer_until_there_is_room_and_loses_nothing(
        daemon_factory, tmp_path, write_map):
    records = streams.generate(30000, seed=20261202)
    path = tmp_path / "in.ndjson"
    streams.write(path, records)
    model = ref.build(ref.EXAMPLE_TABLE, list(enumerate(records, start=1)))

    d = daemon_factory({"sources": [{"name": "src", "table": "App", "file": {"path": str(path)}}],
                        "tables": [ref.EXAMPLE_TABLE]},
                       prefix=["prlimit", f"--fsize={LIMIT}:unlimited"])
    d.write_config({"sources": [{"name": "src", "table": "App", "file": {"path": str(path)}}],
                    "tables": [ref.EXAMPLE_TABLE],
                    "storage": {"path": d.store, "map_size": "1MiB", "max_map_size": "256MiB",
                                "write_map": write_map}})
    d.start()
    error = (f'cannot grow the LMDB map to 8388608 bytes: cannot reserve 8388608 bytes of disk '
             f'for "{d.store}/data.mdb": File too large; free disk space (or raise the file size '
             f'limit) for storage.path, the writer retries')
    wait_stopped_for_want_of_disk(d, error)
    assert "retrying in 250ms: " + error in d.log()
    assert d.status().lmdb_map_size_bytes == 4 << 20
    assert d.proc.poll() is None
    assert health(d.channel, "") == 1  # the process serves reads of what it committed

    # Room again: the same process resumes at its next retry.
    resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE,
                     (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    wait_for("the writer to apply again", lambda: d.source("src").error == "",
             describe=lambda: d.log()[-1000:])
    d.wait_finished("src", path)
    assert d.proc.poll() is None and d.runs == 1
    assert d.scan_all(VIEWS) == {v: [ref_tuple(e) for e in model.scan(v)] for v in VIEWS}
    assert d.positions("src") == {"": expected_position(path)}
    wait_for("cdcview_store_disk_full to be 0",
             lambda: metric(d.metrics(), "cdcview_store_disk_full") == 0)
    wait_for("the view health to say SERVING",
             lambda: health(d.channel, "cdcview.view.GSI1") == 1)
    m = d.metrics()
    assert metric(m, "cdcview_apply_batch_failures_total") >= 1
    assert "SIGBUS" not in d.log()
    d.stop(expect_code=0)


def test_a_full_file_system_with_the_write_map_is_an_error_not_a_sigbus(daemon_factory, tmp_path):
    """A real ENOSPC: the store on a small tmpfs that a ballast file fills, in a mount namespace
    of the daemon's own (unshare -rm: no privilege needed). Without the reservation the write
    map's growth succeeds and the first write to a page the tmpfs cannot hold is a SIGBUS."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -rm (user and mount namespaces) is not allowed here")
    records = streams.generate(30000, seed=20261202)
    path = tmp_path / "in.ndjson"
    streams.write(path, records)
    model = ref.build(ref.EXAMPLE_TABLE, list(enumerate(records, start=1)))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    # 48 MiB with 43 MiB of ballast: the map grows to 4 MiB, and the growth to 8 MiB (4 MiB
    # more) does not fit.
    mount = ('mount -t tmpfs -o size=48m tmpfs "$0" && head -c 45088768 /dev/zero > "$0/ballast"'
             ' && exec "$@"')
    d = daemon_factory({}, prefix=["unshare", "-rm", "sh", "-c", mount, str(mnt)])
    store = str(mnt / "store")
    d.write_config({"sources": [{"name": "src", "table": "App", "file": {"path": str(path)}}],
                    "tables": [ref.EXAMPLE_TABLE],
                    "storage": {"path": store, "map_size": "1MiB", "max_map_size": "256MiB"}})
    d.start()
    error = (f'cannot grow the LMDB map to 8388608 bytes: cannot reserve 8388608 bytes of disk '
             f'for "{store}/data.mdb": No space left on device; free disk space (or raise the '
             f'file size limit) for storage.path, the writer retries')
    wait_stopped_for_want_of_disk(d, error)
    assert d.proc.poll() is None

    # Free the space, as an operator would, through the daemon's view of its mounts.
    os.remove(f"/proc/{d.proc.pid}/root{mnt}/ballast")
    wait_for("the writer to apply again", lambda: d.source("src").error == "",
             describe=lambda: d.log()[-1000:])
    d.wait_finished("src", path)
    assert d.proc.poll() is None and d.runs == 1
    assert d.scan_all(VIEWS) == {v: [ref_tuple(e) for e in model.scan(v)] for v in VIEWS}
    wait_for("cdcview_store_disk_full to be 0",
             lambda: metric(d.metrics(), "cdcview_store_disk_full") == 0)
    d.stop(expect_code=0)
