"""A damaged store is an error, not an abort: `cdcviewd --verify-store` names what is damaged,
the daemon refuses to start on it with that message, and with verification skipped a read that
meets a damaged page answers DATA_LOSS on both ports while the process stays up; the writer
stops on it and health turns NOT_SERVING."""

import json
import shutil
import struct
import subprocess

import grpc

import reference as ref
from conftest import DAEMON_BIN, SAMPLE, expected_position, health, ref_tuple, wait_for

VIEWS = ref.EXAMPLE_VIEWS
DAMAGED = "GSI1"


def config_for(source_path, follow=False):
    return {"sources": [{"name": "src", "table": "App",
                         "file": {"path": source_path, "follow": follow}}],
            "tables": [ref.EXAMPLE_TABLE]}


class Record:
    """A named database's record (MDB_db) in the main database of an LMDB 0.9 data file."""

    def __init__(self, data, name):
        with open(data, "rb") as f:
            raw = f.read()
        self.data = data
        psize = struct.unpack_from("<I", raw, 40)[0]  # meta 0's free-page record: the page size
        metas = [i * psize for i in (0, 1)]
        meta = max(metas, key=lambda m: struct.unpack_from("<Q", raw, m + 144)[0])  # its txnid
        self.last_page = struct.unpack_from("<Q", raw, meta + 136)[0]
        main_depth = struct.unpack_from("<H", raw, meta + 88 + 6)[0]
        main_root = struct.unpack_from("<Q", raw, meta + 88 + 40)[0]
        assert main_depth == 1, "the main database fits one leaf page"
        page = main_root * psize
        lower = struct.unpack_from("<H", raw, page + 12)[0]
        for i in range((lower - 16) // 2):
            node = page + struct.unpack_from("<H", raw, page + 16 + 2 * i)[0]
            _, _, _, ksize = struct.unpack_from("<HHHH", raw, node)
            if raw[node + 8:node + 8 + ksize] == name.encode():
                self.offset = node + 8 + ksize  # of the 48-byte record in the file
                (self.branch_pages, self.leaf_pages, self.overflow_pages, self.entries,
                 self.root) = struct.unpack_from("<QQQQQ", raw, self.offset + 8)
                return
        raise AssertionError(f"no database {name} in {data}")

    def set_root(self, page):
        with open(self.data, "r+b") as f:
            f.seek(self.offset + 40)
            f.write(struct.pack("<Q", page))


def damage_root(store, view):
    """Points `view`'s root past the last page, as a torn copy or a bad sector might; returns
    the problems the verifier reports for it."""
    record = Record(f"{store}/data.mdb", f"view/{view}")
    bad = record.last_page + 1000
    record.set_root(bad)
    problems = [f"view/{view}: the database record points to page {bad}, past the last used "
                f"page {record.last_page}"]
    for what, n in (("entries", record.entries), ("branch pages", record.branch_pages),
                    ("leaf pages", record.leaf_pages), ("overflow pages", record.overflow_pages)):
        if n:
            problems.append(f"view/{view}: the database record counts {n} {what}, the tree holds 0")
    return problems


def verify(d):
    return subprocess.run([DAEMON_BIN, "--config", d.config_path, "--verify-store"],
                          cwd=d.workdir, capture_output=True, text=True, timeout=60)


def start_refused(d, *args):
    p = subprocess.run([DAEMON_BIN, "--config", d.config_path, *args], cwd=d.workdir,
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def test_verify_store_names_the_damage_and_the_daemon_refuses_to_start_on_it(daemon_factory):
    d = daemon_factory(config_for(SAMPLE))
    d.start()
    d.wait_finished("src", SAMPLE)
    d.stop()

    clean = verify(d)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert clean.stdout.startswith(f'store "{d.store}" is clean: '), clean.stdout

    problems = damage_root(d.store, DAMAGED)
    damaged = verify(d)
    assert damaged.returncode == 1, damaged.stdout + damaged.stderr
    assert damaged.stdout == (f'store "{d.store}" is damaged: {len(problems)} problems\n'
                              + "".join(f"  {p}\n" for p in problems))

    # Closed cleanly, but small: verified at start, refused with the same problems.
    code, output = start_refused(d)
    assert code == 1, output
    assert output.endswith(
        f'cdcviewd: opening the store: store "{d.store}" is damaged (verified at start: it is '
        f'small): {len(problems)} problems\n' + "".join(f"  {p}\n" for p in problems)
        + "restore it from a backup, or move it away so that the sources replay into a new "
          "store; cdcviewd --verify-store lists every problem\n"), output

    # A store in use is not verified under its writer.
    d.args = ["--set", "storage.verify_at_start=never"]
    d.start()
    busy = verify(d)
    assert busy.returncode == 2, busy.stdout
    assert busy.stdout == (
        f'cdcviewd: cannot verify the store: another cdcviewd (pid {d.proc.pid}) holds '
        f'"{d.store}"; stop it or give this one another storage.path (verify a stopped store, '
        f'or a copy of it)\n')


def test_a_read_of_a_damaged_page_is_data_loss_and_the_process_stays_up(daemon_factory, tmp_path):
    source = tmp_path / "stream.ndjson"
    shutil.copy(SAMPLE, source)
    config = config_for(str(source), follow=True)
    config["server"] = {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0",
                        "fast_reads": "127.0.0.1:0"}
    d = daemon_factory(config)
    d.start()
    records = ref.load_records(SAMPLE)
    wait_for("the copy of the sample applied",
             lambda: d.positions("src").get("") == expected_position(str(source)))
    d.stop()
    damage_root(d.store, DAMAGED)

    # Verification skipped: LMDB meets the damaged page only when a read gets there.
    d.args = ["--set", "storage.verify_at_start=never"]
    d.start()
    # Opening a cursor on the view reads its root, and LMDB keeps that error to itself: the
    # first read reports the failed transaction.
    want = ("view GSI1: the store is damaged between keys (first) and (last) (reading the store: "
            "MDB_BAD_TXN: Transaction must abort, has a child, or is invalid (an earlier read in "
            "it met a damaged page)); stop cdcviewd and run cdcviewd --verify-store")
    fast = grpc.insecure_channel(d.fast_addr)
    for stub in (d.stub, d.stubs.grpc.ViewServiceStub(fast)):
        try:
            stub.Scan(d.stubs.vs.ScanRequest(view=DAMAGED), timeout=10)
            raise AssertionError("a Scan over the damaged page answered")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.DATA_LOSS, e
            assert e.details() == want
    fast.close()

    # The process is up and answers what it can: the other views, health, metrics.
    assert d.proc.poll() is None
    model = ref.build(ref.EXAMPLE_TABLE, records)
    others = [v for v in VIEWS if v != DAMAGED]
    assert d.scan_all(others) == {v: [ref_tuple(e) for e in model.scan(v)] for v in others}
    assert health(d.channel, "") == 1
    def errors(kind):
        return d.metrics().get(("cdcview_store_errors_total", frozenset({"kind": kind}.items())))
    wait_for("the store errors counted", lambda: errors("bad_txn") == 2)
    assert errors("corrupted") == 0 and errors("page_not_found") == 0

    # An event for the damaged view: the writer meets the page, stops, and says why.
    event = json.loads(next(line for line in open(SAMPLE, encoding="utf-8")
                            if '"GSI1PK"' in line and '"INSERT"' in line))
    event["dynamodb"]["Keys"]["PK"]["S"] = "USER#damaged"
    event["dynamodb"]["NewImage"]["PK"]["S"] = "USER#damaged"
    event["dynamodb"]["SequenceNumber"] = "900000000000000000001"
    with open(source, "a", encoding="utf-8") as f:
        f.write(json.dumps(event) + "\n")
    wait_for("health NOT_SERVING", lambda: health(d.channel, "") == 2,
             describe=lambda: d.log()[-2000:])
    for view in VIEWS:
        assert health(d.channel, f"cdcview.view.{view}") == 2
    error = d.source("src").error
    assert error == (
        "the writer stopped: cannot apply a batch of 1 events: writing the store: MDB_BAD_TXN: "
        "Transaction must abort, has a child, or is invalid (an earlier read in it met a damaged "
        "page); the store is damaged: stop cdcviewd, run cdcviewd --verify-store, and restore the "
        "store from a backup or delete it so that the sources replay into a new one")
    assert error in d.log()
    assert d.proc.poll() is None
    assert d.scan_all(others) == {v: [ref_tuple(e) for e in model.scan(v)] for v in others}
    d.stop()

    # A run that met store errors leaves no clean-shutdown marker: the next start verifies.
    d.args = []
    code, output = start_refused(d)
    assert code == 1, output
    assert (f'store "{d.store}" is damaged (verified at start: the last run did not close the '
            f'store cleanly)') in output, output
