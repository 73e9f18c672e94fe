// What a Node.js service does with cdcview's DynamoDB endpoint: the AWS SDK for JavaScript v3
// (@aws-sdk/client-dynamodb) with only the endpoint set, on the bundled sample's table App.
// Prints one JSON object per line, each named by "op", in the shape the Java client prints
// (tests/integration/sdk/java); tests/integration/test_dynamodb_sdks.py sends the same requests
// with boto3 and compares the answers.
//
//   node reads.mjs URL
import {
  BatchGetItemCommand, DescribeTableCommand, DynamoDBClient, DynamoDBServiceException,
  GetItemCommand, ListTablesCommand, PutItemCommand, QueryCommand, paginateQuery, paginateScan,
} from "@aws-sdk/client-dynamodb";

const TABLE = "App";
const APPLIED = "x-cdcview-applied-position";

if (process.argv.length !== 3) {
  console.error("usage: node reads.mjs ENDPOINT_URL (cdcviewd's server.dynamodb)");
  process.exit(2);
}
const ddb = new DynamoDBClient({
  endpoint: process.argv[2],
  region: "us-east-1",
  credentials: { accessKeyId: "any", secretAccessKey: "any" },
});

const print = (o) => console.log(JSON.stringify(o));

// An attribute value in DynamoDB's JSON, as boto3's low-level client returns it (binary as
// base64).
function value(v) {
  const [type, x] = Object.entries(v).find(([, y]) => y !== undefined);
  switch (type) {
    case "B": return { B: Buffer.from(x).toString("base64") };
    case "BS": return { BS: x.map((b) => Buffer.from(b).toString("base64")) };
    case "L": return { L: x.map(value) };
    case "M": return { M: item(x) };
    default: return { [type]: x };
  }
}
const item = (i) => Object.fromEntries(Object.entries(i ?? {}).map(([k, v]) => [k, value(v)]));
const items = (list) => (list ?? []).map(item);
const s = (v) => ({ S: v });
const n = (v) => ({ N: v });

// A command with request headers added and the answer's headers kept, as a service adds its
// own headers with the SDK's middleware stack.
async function send(command, headers = {}) {
  let answered = {};
  command.middlewareStack.add((next) => async (args) => {
    Object.assign(args.request.headers, headers);
    const result = await next(args);
    answered = result.response.headers;
    return result;
  }, { step: "finalizeRequest", name: "cdcviewHeaders" });
  const output = await ddb.send(command);
  return [output, answered];
}

async function error(name, call) {
  try {
    await call();
    print({ op: `Error:${name}`, Code: "(none: the call succeeded)" });
  } catch (e) {
    if (!(e instanceof DynamoDBServiceException)) throw e;
    print({ op: `Error:${name}`, Code: e.name, Message: e.message, Status: e.$metadata.httpStatusCode });
  }
}

async function main() {
  print({ op: "ListTables", TableNames: (await ddb.send(new ListTablesCommand({}))).TableNames });

  const described = (await ddb.send(new DescribeTableCommand({ TableName: TABLE }))).Table;
  const keySchema = (schema) => schema.map((k) => [k.AttributeName, k.KeyType]);
  print({
    op: "DescribeTable", TableName: described.TableName, KeySchema: keySchema(described.KeySchema),
    Indexes: Object.fromEntries(described.GlobalSecondaryIndexes.map((g) => [g.IndexName, {
      KeySchema: keySchema(g.KeySchema), ProjectionType: g.Projection.ProjectionType,
      IndexStatus: g.IndexStatus, ItemCount: g.ItemCount,
    }])),
  });

  // The README's access pattern, a page of two at a time through the SDK's own paginator.
  const pending = {
    TableName: TABLE, IndexName: "GSI1",
    KeyConditionExpression: "GSI1PK = :pk AND begins_with(GSI1SK, :day)",
    ExpressionAttributeValues: { ":pk": s("STATUS#PENDING"), ":day": s("2025-03-05") },
    ProjectionExpression: "PK, SK, GSI1SK, #t", ExpressionAttributeNames: { "#t": "total" },
  };
  const paged = [];
  let pages = 0;
  for await (const page of paginateQuery({ client: ddb }, { ...pending, Limit: 2 })) {
    pages++;
    paged.push(...items(page.Items));
  }
  print({ op: "QueryPaged", Items: paged, Pages: pages });

  // Newest first, one page of three by hand, then the next from its LastEvaluatedKey.
  const newest = {
    TableName: TABLE, IndexName: "GSI1", KeyConditionExpression: "GSI1PK = :pk",
    ExpressionAttributeValues: { ":pk": s("STATUS#PENDING") }, ScanIndexForward: false, Limit: 3,
  };
  const first = await ddb.send(new QueryCommand(newest));
  print({ op: "QueryFirstPage", Items: items(first.Items), LastEvaluatedKey: item(first.LastEvaluatedKey) });
  const second = await ddb.send(new QueryCommand({ ...newest, ExclusiveStartKey: first.LastEvaluatedKey }));
  print({ op: "QuerySecondPage", Items: items(second.Items), LastEvaluatedKey: item(second.LastEvaluatedKey) });

  // Every attribute of an index that projects them all.
  const whole = await ddb.send(new QueryCommand({ ...newest, Select: "ALL_ATTRIBUTES", Limit: 2 }));
  print({ op: "QueryAllAttributes", Items: items(whole.Items) });

  // A filter counted: Limit is applied before it, as DynamoDB does.
  const counted = await ddb.send(new QueryCommand({
    TableName: TABLE, IndexName: "GSI1", KeyConditionExpression: "GSI1PK = :pk",
    FilterExpression: "#t > :min", ExpressionAttributeNames: { "#t": "total" },
    ExpressionAttributeValues: { ":pk": s("STATUS#PENDING"), ":min": n("500") },
    Select: "COUNT", Limit: 40,
  }));
  print({ op: "QueryCount", Count: counted.Count, ScannedCount: counted.ScannedCount });

  // The base table: one item, then two in one batch.
  const key = { PK: first.Items[0].PK, SK: first.Items[0].SK };
  const other = { PK: first.Items[1].PK, SK: first.Items[1].SK };
  const got = await ddb.send(new GetItemCommand({
    TableName: TABLE, Key: key, ProjectionExpression: "PK, SK, GSI1SK, #s",
    ExpressionAttributeNames: { "#s": "status" },
  }));
  print({ op: "GetItem", Item: item(got.Item) });
  const batch = await ddb.send(new BatchGetItemCommand({
    RequestItems: { [TABLE]: { Keys: [key, other], ProjectionExpression: "PK, SK, GSI1SK" } },
  }));
  print({
    op: "BatchGetItem", Items: items(batch.Responses[TABLE]),
    Unprocessed: Object.keys(batch.UnprocessedKeys ?? {}).length,
  });

  // A parallel scan of the index, two segments, pages of 50: each segment's items in order.
  const segments = [];
  for (const segment of [0, 1]) {
    const inSegment = [];
    for await (const page of paginateScan({ client: ddb }, {
      TableName: TABLE, IndexName: "GSI1", Segment: segment, TotalSegments: 2, Limit: 50,
    })) {
      inSegment.push(...items(page.Items));
    }
    segments.push(inSegment);
  }
  print({ op: "ScanSegments", Segments: segments });

  // Read-your-writes: the applied position of one answer sent back as the next one's minimum.
  const [, headers] = await send(new QueryCommand(pending));
  const applied = headers[APPLIED] ?? "";
  const [waited] = await send(new QueryCommand(pending), { "x-cdcview-min-position": applied });
  print({ op: "MinPosition", Applied: applied, Count: waited.Count });

  // Errors, as DynamoDBServiceException with DynamoDB's code, message and status.
  await error("ConsistentReadOnIndex", () => ddb.send(new QueryCommand({
    TableName: TABLE, IndexName: "GSI1", KeyConditionExpression: "GSI1PK = :pk",
    ConsistentRead: true, ExpressionAttributeValues: { ":pk": s("STATUS#PENDING") },
  })));
  await error("UnknownTable", () => ddb.send(new DescribeTableCommand({ TableName: "Nope" })));
  await error("PutItem", () => ddb.send(new PutItemCommand({ TableName: TABLE, Item: key })));
  await error("BadMinPosition", () => send(new QueryCommand(pending),
    { "x-cdcview-min-position": "not-a-token" }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
