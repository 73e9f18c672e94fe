"""DynamoDB endpoints for the integration tests: moto's server in a subprocess, boto3 clients,
and cdcview configs for a DynamoDB Streams source.

The daemon and boto3 both take credentials from the environment (dummy keys: moto accepts
any), exactly as a user's deployment would.
"""

import os
import subprocess
import sys

import pytest

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
REGION = "us-east-1"

_MOTO = """
import sys
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()  # until the test closes our stdin
server.stop()
"""


class MotoServer:
    """moto's DynamoDB (and Streams) endpoint on a free loopback port."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", _MOTO], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.isdigit():
            self.stop()
            pytest.fail(f"moto server did not start (printed {line!r})")
        self.url = f"http://127.0.0.1:{int(line)}"

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (subprocess.TimeoutExpired, BrokenPipeError):
                self.proc.kill()
                self.proc.wait()

    def client(self, service="dynamodb"):
        import boto3
        return boto3.client(service, endpoint_url=self.url, region_name=REGION)


def source_config(endpoint, table="App", name="app", **extra):
    """A cdcview source reading `table`'s stream at `endpoint`, fast polling for tests."""
    dynamodb = {"table_name": table, "region": REGION, "endpoint": endpoint,
                "poll_interval_ms": 50, "discovery_interval_ms": 500}
    dynamodb.update(extra)
    return {"name": name, "table": table, "dynamodb": dynamodb}


def create_table(ddb, name, gsis=(), view_type="NEW_AND_OLD_IMAGES", key=("PK", "SK"),
                 attribute_types=None):
    """A table with a stream and the given GSIs [(name, pk, sk or None, projection)]."""
    types = {"PK": "S", "SK": "S"}
    types.update(attribute_types or {})
    schema = [{"AttributeName": key[0], "KeyType": "HASH"}]
    if key[1]:
        schema.append({"AttributeName": key[1], "KeyType": "RANGE"})
    used = set(k for k in key if k)
    indexes = []
    for gsi_name, pk, sk, projection in gsis:
        ks = [{"AttributeName": pk, "KeyType": "HASH"}]
        used.add(pk)
        if sk:
            ks.append({"AttributeName": sk, "KeyType": "RANGE"})
            used.add(sk)
        indexes.append({"IndexName": gsi_name, "KeySchema": ks,
                        "Projection": {"ProjectionType": projection}})
    kwargs = {}
    if indexes:
        kwargs["GlobalSecondaryIndexes"] = indexes
    ddb.create_table(
        TableName=name, KeySchema=schema, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": types.get(a, "S")}
                              for a in sorted(used)],
        StreamSpecification={"StreamEnabled": True, "StreamViewType": view_type}, **kwargs)
