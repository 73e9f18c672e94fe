"""One process per store: a second cdcviewd on a storage.path in use is refused at once, and the
lock on it dies with its holder, kill -9 included."""

import subprocess
import time

import pytest

import reference as ref
from conftest import DAEMON_BIN, SAMPLE, health, ref_tuple

VIEWS = ref.EXAMPLE_VIEWS


def config_for(store=None):
    """The example table fed from the sample; in `store` if given, else in the daemon's own."""
    config = {"sources": [{"name": "src", "table": "App", "file": {"path": SAMPLE}}],
              "tables": [ref.EXAMPLE_TABLE]}
    if store is not None:
        config["storage"] = {"path": store, "map_size": "64MiB"}
    return config


def run_refused(d):
    """Runs cdcviewd on `d`'s config, expecting it to exit by itself; returns (code, output,
    seconds it took)."""
    started = time.monotonic()
    proc = subprocess.Popen([DAEMON_BIN, "--config", d.config_path], cwd=d.workdir,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True)
    try:
        output, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        pytest.fail(f"a second cdcviewd on the same store was still running after 20s; "
                    f"output:\n{output[-3000:]}")
    return proc.returncode, output, time.monotonic() - started


def test_a_second_daemon_on_a_store_in_use_exits_and_the_lock_dies_with_kill_9(daemon_factory):
    first = daemon_factory(config_for(), name="first")
    first.start()
    first.wait_finished("src", SAMPLE)
    before = first.scan_all(VIEWS)
    model = ref.build(ref.EXAMPLE_TABLE, ref.load_records(SAMPLE))
    assert before == {v: [ref_tuple(e) for e in model.scan(v)] for v in VIEWS}
    with open(f"{first.store}/cdcviewd.lock", encoding="utf-8") as f:
        assert f.read() == f"{first.proc.pid}\n"

    second = daemon_factory(config_for(first.store), name="second")
    code, output, took = run_refused(second)
    assert code == 1, output
    assert output.splitlines()[-1] == (
        f'cdcviewd: opening the store: another cdcviewd (pid {first.proc.pid}) holds '
        f'"{first.store}"; stop it or give this one another storage.path')
    assert took < 10

    # The first one never noticed: it serves the same views and stays healthy.
    assert first.proc.poll() is None
    assert health(first.channel, "") == 1
    assert first.scan_all(VIEWS) == before
    assert first.source("src").state == "finished"

    # kill -9 leaves the lock file behind but not the lock: the next daemon starts on the store
    # and serves exactly the views the first one committed, applying nothing again.
    first.kill()
    second.start()
    second.wait_finished("src", SAMPLE)
    assert second.source("src").events_applied == 0
    assert second.scan_all(VIEWS) == before
    with open(f"{first.store}/cdcviewd.lock", encoding="utf-8") as f:
        assert f.read() == f"{second.proc.pid}\n"
    second.stop(expect_code=0)
