"""Other AWS SDKs than boto3 against the DynamoDB endpoint, with only the endpoint set.

Three services' clients, each printing its answers on the bundled sample as JSON lines in the
same shape: tests/integration/sdk/java (the AWS SDK for Java 2.x, software.amazon.awssdk:dynamodb,
its own paginators, headers added through its request override), tests/integration/sdk/js (the
AWS SDK for JavaScript v3, @aws-sdk/client-dynamodb on Node.js, its paginators, headers added
and read through its middleware stack) and tests/integration/sdk/go (the AWS SDK for Go v2,
its paginators, headers added with smithy-go's SetHeaderValue and read from the raw response). The same requests sent with boto3 must give the
same answers, and the paged query must hold exactly the sample's items. The SDKs differ in how
they sign, page, send headers and read errors, so this checks the wire protocol, not one
client's leniency.

A client is skipped, with the reason, only when it cannot be built for want of its toolchain
(Maven and Java 17; Node.js 20 and npm; Go 1.24) or of its packages from the registries (a
compile error or a failing install for another reason fails).
"""

import json
import os
import re
import shutil
import subprocess

import pytest

import maven_build
from conftest import REPO
from test_dynamodb_api import call, client, sample, sample_items  # noqa: F401 (fixture)

JAVA_PROJECT = "tests/integration/sdk/java"
JAVA_NAME = "dynamodb-java-client"
JS_PROJECT = os.path.join(REPO, "tests", "integration", "sdk", "js")
GO_PROJECT = os.path.join(REPO, "tests", "integration", "sdk", "go")
TABLE = "App"
# What npm and go print when a registry cannot be reached.
NPM_OFFLINE = ("ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT", "ECONNREFUSED", "ECONNRESET", "ENETUNREACH")
GO_OFFLINE = ("dial tcp", "no such host", "i/o timeout", "connection refused", "TLS handshake",
              "module lookup disabled")


def java_command(url):
    try:
        maven_build.build(JAVA_PROJECT, JAVA_NAME)
    except maven_build.BuildUnavailable as e:
        pytest.skip(f"the AWS SDK for Java client cannot be built here: {e}")
    return ["java", "-cp", maven_build.classpath(JAVA_PROJECT, JAVA_NAME),
            "cdcview.sdk.DynamoDbReads", url]


def build_or_skip(command, cwd, offline, what):
    """Runs a client's build `command` in `cwd`: a skip naming `what` when its stderr shows one of
    the `offline` markers (a registry out of reach), a failure for any other error."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    if done.returncode == 0:
        return
    if any(marker in done.stderr for marker in offline):
        pytest.skip(f"{command[0]} cannot download {what}: "
                    + done.stderr.strip().splitlines()[-1])
    raise RuntimeError(f"{' '.join(command)} in {cwd} failed ({done.returncode}):\n"
                       f"{done.stderr[-4000:]}")


def js_command(url):
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("the AWS SDK for JavaScript client needs node and npm (Node.js 20 or newer)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 20:
        pytest.skip(f"the AWS SDK for JavaScript v3 needs Node.js 20 or newer; this is {version}")
    build_or_skip([npm, "ci", "--no-audit", "--no-fund"], JS_PROJECT, NPM_OFFLINE,
                  "@aws-sdk/client-dynamodb")
    return [node, os.path.join(JS_PROJECT, "reads.mjs"), url]


def go_command(url, out_dir):
    go = shutil.which("go")
    if go is None:
        pytest.skip("the AWS SDK for Go client needs go (1.24 or newer)")
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout
    found = re.match(r"go(\d+)\.(\d+)", version.strip())
    if found is None or (int(found.group(1)), int(found.group(2))) < (1, 24):
        pytest.skip(f"the AWS SDK for Go v2 needs Go 1.24 or newer; this is {version.strip()}")
    binary = os.path.join(out_dir, "dynamodb-go-client")
    build_or_skip([go, "build", "-o", binary, "."], GO_PROJECT, GO_OFFLINE, "the AWS SDK for Go v2")
    return [binary, url]


@pytest.fixture(scope="module", params=["java", "js", "go"])
def sdk_answers(request, sample, tmp_path_factory):  # noqa: F811 (the fixture imported above)
    _, url = sample
    if request.param == "java":
        command = java_command(url)
    elif request.param == "js":
        command = js_command(url)
    else:
        command = go_command(url, str(tmp_path_factory.mktemp("go")))
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    answers = {}
    for line in done.stdout.splitlines():
        answer = json.loads(line)
        answers[answer.pop("op")] = answer
    return answers, url


def by_key(items):
    return sorted(items, key=lambda i: json.dumps(i, sort_keys=True))


def boto3_pages(ours, request):
    """Every page of `request`, following LastEvaluatedKey as the SDKs' paginators do."""
    pages, start = [], {}
    while True:
        page = ours.query(**request, **start)
        pages.append(page)
        if "LastEvaluatedKey" not in page:
            return pages
        start = {"ExclusiveStartKey": page["LastEvaluatedKey"]}


PENDING = dict(TableName=TABLE, IndexName="GSI1",
               KeyConditionExpression="GSI1PK = :pk AND begins_with(GSI1SK, :day)",
               ExpressionAttributeValues={":pk": {"S": "STATUS#PENDING"},
                                          ":day": {"S": "2025-03-05"}},
               ProjectionExpression="PK, SK, GSI1SK, #t",
               ExpressionAttributeNames={"#t": "total"})
NEWEST = dict(TableName=TABLE, IndexName="GSI1", KeyConditionExpression="GSI1PK = :pk",
              ExpressionAttributeValues={":pk": {"S": "STATUS#PENDING"}},
              ScanIndexForward=False, Limit=3)


def test_tables_and_indexes_as_boto3_sees_them(sdk_answers):
    answers, url = sdk_answers
    ours = client(url)
    assert answers["ListTables"] == {"TableNames": ours.list_tables()["TableNames"]}
    assert answers["ListTables"] == {"TableNames": ["App"]}
    table = ours.describe_table(TableName=TABLE)["Table"]
    assert answers["DescribeTable"] == {
        "TableName": "App",
        "KeySchema": [[k["AttributeName"], k["KeyType"]] for k in table["KeySchema"]],
        "Indexes": {g["IndexName"]: {
            "KeySchema": [[k["AttributeName"], k["KeyType"]] for k in g["KeySchema"]],
            "ProjectionType": g["Projection"]["ProjectionType"],
            "IndexStatus": g["IndexStatus"], "ItemCount": g["ItemCount"]}
            for g in table["GlobalSecondaryIndexes"]}}
    assert answers["DescribeTable"]["KeySchema"] == [["PK", "HASH"], ["SK", "RANGE"]]
    assert answers["DescribeTable"]["Indexes"]["GSI1"]["ItemCount"] == sum(
        "GSI1PK" in i and "GSI1SK" in i for i in sample_items().values())


def test_queries_and_pages_as_boto3_sees_them(sdk_answers):
    answers, url = sdk_answers
    ours = client(url)
    pages = boto3_pages(ours, dict(PENDING, Limit=2))
    assert answers["QueryPaged"] == {"Items": [i for p in pages for i in p["Items"]],
                                     "Pages": len(pages)}
    want = sorted((i for i in sample_items().values()
                   if i.get("GSI1PK") == {"S": "STATUS#PENDING"}
                   and i["GSI1SK"]["S"].startswith("2025-03-05")),
                  key=lambda i: i["GSI1SK"]["S"])
    assert len(want) > 7
    assert answers["QueryPaged"]["Items"] == [
        {k: i[k] for k in ("PK", "SK", "GSI1SK", "total")} for i in want]
    # No LastEvaluatedKey on a page that ends the range, so no empty page after it.
    assert answers["QueryPaged"]["Pages"] == (len(want) + 1) // 2

    first = ours.query(**NEWEST)
    assert answers["QueryFirstPage"] == {"Items": first["Items"],
                                         "LastEvaluatedKey": first["LastEvaluatedKey"]}
    second = ours.query(**NEWEST, ExclusiveStartKey=first["LastEvaluatedKey"])
    assert answers["QuerySecondPage"] == {"Items": second["Items"],
                                          "LastEvaluatedKey": second.get("LastEvaluatedKey", {})}
    assert sorted(answers["QueryFirstPage"]["LastEvaluatedKey"]) == ["GSI1PK", "GSI1SK", "PK",
                                                                     "SK"]

    whole = ours.query(**dict(NEWEST, Limit=2), Select="ALL_ATTRIBUTES")["Items"]
    assert answers["QueryAllAttributes"] == {"Items": whole}
    assert whole[0] == sample_items()[(whole[0]["PK"]["S"], whole[0]["SK"]["S"])]

    counted = ours.query(TableName=TABLE, IndexName="GSI1", KeyConditionExpression="GSI1PK = :pk",
                         FilterExpression="#t > :min", ExpressionAttributeNames={"#t": "total"},
                         ExpressionAttributeValues={":pk": {"S": "STATUS#PENDING"},
                                                    ":min": {"N": "500"}},
                         Select="COUNT", Limit=40)
    assert answers["QueryCount"] == {"Count": counted["Count"],
                                     "ScannedCount": counted["ScannedCount"]}
    assert answers["QueryCount"]["ScannedCount"] == 40
    assert 0 < answers["QueryCount"]["Count"] < 40


def test_base_table_reads_and_parallel_scans_as_boto3_sees_them(sdk_answers):
    answers, url = sdk_answers
    ours = client(url)
    newest = ours.query(**NEWEST)["Items"]
    key = {"PK": newest[0]["PK"], "SK": newest[0]["SK"]}
    other = {"PK": newest[1]["PK"], "SK": newest[1]["SK"]}
    got = ours.get_item(TableName=TABLE, Key=key, ProjectionExpression="PK, SK, GSI1SK, #s",
                        ExpressionAttributeNames={"#s": "status"})
    assert answers["GetItem"] == {"Item": got["Item"]}
    stored = sample_items()[(key["PK"]["S"], key["SK"]["S"])]
    assert answers["GetItem"]["Item"] == {k: stored[k] for k in ("PK", "SK", "GSI1SK", "status")}

    batch = ours.batch_get_item(RequestItems={TABLE: {"Keys": [key, other],
                                                      "ProjectionExpression": "PK, SK, GSI1SK"}})
    assert by_key(answers["BatchGetItem"]["Items"]) == by_key(batch["Responses"][TABLE])
    assert len(answers["BatchGetItem"]["Items"]) == 2
    assert answers["BatchGetItem"]["Unprocessed"] == 0

    segments = []
    for segment in (0, 1):
        request = dict(TableName=TABLE, IndexName="GSI1", Segment=segment, TotalSegments=2,
                       Limit=50)
        items, start = [], {}
        while True:
            page = ours.scan(**request, **start)
            items += page["Items"]
            if "LastEvaluatedKey" not in page:
                break
            start = {"ExclusiveStartKey": page["LastEvaluatedKey"]}
        segments.append(items)
    assert answers["ScanSegments"] == {"Segments": segments}
    # Together the segments hold every item of the index once.
    keys = sorted((i["PK"]["S"], i["SK"]["S"]) for s in segments for i in s)
    assert keys == sorted(k for k, i in sample_items().items() if "GSI1PK" in i and "GSI1SK" in i)
    assert min(len(s) for s in segments) > 0


def test_headers_and_errors_as_boto3_sees_them(sdk_answers):
    answers, url = sdk_answers
    ours = client(url)
    # The token the SDK read from the answer's header is the one boto3 reads (nothing is
    # applied meanwhile), and sent back as the minimum it is honoured.
    answered = ours.query(**PENDING)
    applied = answered["ResponseMetadata"]["HTTPHeaders"]["x-cdcview-applied-position"]
    assert answers["MinPosition"] == {"Applied": applied, "Count": answered["Count"]}

    assert answers["Error:ConsistentReadOnIndex"] == dict(zip(
        ("Code", "Message", "Status"),
        call(ours, "query", TableName=TABLE, IndexName="GSI1", ConsistentRead=True,
             KeyConditionExpression="GSI1PK = :pk",
             ExpressionAttributeValues={":pk": {"S": "STATUS#PENDING"}})[1:]))
    assert answers["Error:ConsistentReadOnIndex"] == {
        "Code": "ValidationException", "Status": 400,
        "Message": "Consistent reads are not supported on global secondary indexes"}
    assert answers["Error:UnknownTable"] == {
        "Code": "ResourceNotFoundException", "Status": 400,
        "Message": "Requested resource not found: Table: Nope not found"}
    key = {"PK": {"S": "USER#u001"}, "SK": {"S": "PROFILE"}}
    assert answers["Error:PutItem"] == dict(zip(
        ("Code", "Message", "Status"), call(ours, "put_item", TableName=TABLE, Item=key)[1:]))
    assert answers["Error:PutItem"] == {
        "Code": "ValidationException", "Status": 400,
        "Message": "cdcview's DynamoDB endpoint is read-only: PutItem is not served; write to "
                   "the table itself (its stream feeds cdcview)"}

    # The header the boto3 example adds with an event hook, added here through the SDK's own way
    # (Java: a request override; JavaScript: a middleware; Go: an API option).
    hooked = client(url)
    hooked.meta.events.register(
        "before-sign.dynamodb.Query",
        lambda request, **_: request.headers.__setitem__("x-cdcview-min-position", "not-a-token"))
    assert answers["Error:BadMinPosition"] == dict(zip(
        ("Code", "Message", "Status"), call(hooked, "query", **PENDING)[1:]))
    assert answers["Error:BadMinPosition"] == {
        "Code": "ValidationException", "Status": 400,
        "Message": "x-cdcview-min-position is not base64; pass an earlier answer's "
                   "x-cdcview-applied-position unchanged"}
