package cdcview.sdk;

import java.net.URI;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.core.SdkBytes;
import software.amazon.awssdk.http.urlconnection.UrlConnectionHttpClient;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.dynamodb.DynamoDbClient;
import software.amazon.awssdk.services.dynamodb.model.AttributeValue;
import software.amazon.awssdk.services.dynamodb.model.BatchGetItemResponse;
import software.amazon.awssdk.services.dynamodb.model.DescribeTableResponse;
import software.amazon.awssdk.services.dynamodb.model.DynamoDbException;
import software.amazon.awssdk.services.dynamodb.model.GetItemResponse;
import software.amazon.awssdk.services.dynamodb.model.GlobalSecondaryIndexDescription;
import software.amazon.awssdk.services.dynamodb.model.KeySchemaElement;
import software.amazon.awssdk.services.dynamodb.model.KeysAndAttributes;
import software.amazon.awssdk.services.dynamodb.model.QueryRequest;
import software.amazon.awssdk.services.dynamodb.model.QueryResponse;
import software.amazon.awssdk.services.dynamodb.model.ScanRequest;
import software.amazon.awssdk.services.dynamodb.model.Select;

/**
 * What a Java service does with cdcview's DynamoDB endpoint: the AWS SDK for Java 2.x with only
 * the endpoint set, on the bundled sample's table App. Prints one JSON object per line, each
 * named by "op"; tests/integration/test_dynamodb_sdks.py sends the same requests with boto3 and
 * compares the answers.
 *
 * <pre>java -cp target/dynamodb-java-client.jar:target/lib/* cdcview.sdk.DynamoDbReads URL</pre>
 */
public final class DynamoDbReads {
  private static final String TABLE = "App";
  private static final String APPLIED = "x-cdcview-applied-position";

  public static void main(String[] args) {
    if (args.length != 1) {
      System.err.println("usage: DynamoDbReads ENDPOINT_URL (cdcviewd's server.dynamodb)");
      System.exit(2);
    }
    try (DynamoDbClient ddb = DynamoDbClient.builder()
        .endpointOverride(URI.create(args[0]))
        .region(Region.US_EAST_1)
        .credentialsProvider(StaticCredentialsProvider.create(AwsBasicCredentials.create("any", "any")))
        .httpClient(UrlConnectionHttpClient.create())
        .build()) {
      run(ddb);
    }
  }

  private static void run(DynamoDbClient ddb) {
    print(obj("op", "ListTables", "TableNames", ddb.listTables().tableNames()));

    DescribeTableResponse described = ddb.describeTable(b -> b.tableName(TABLE));
    Map<String, Object> indexes = new TreeMap<>();
    for (GlobalSecondaryIndexDescription g : described.table().globalSecondaryIndexes()) {
      indexes.put(g.indexName(), obj("KeySchema", keySchema(g.keySchema()),
          "ProjectionType", g.projection().projectionTypeAsString(),
          "IndexStatus", g.indexStatusAsString(), "ItemCount", g.itemCount()));
    }
    print(obj("op", "DescribeTable", "TableName", described.table().tableName(),
        "KeySchema", keySchema(described.table().keySchema()), "Indexes", indexes));

    // The README's access pattern, a page of two at a time through the SDK's own paginator.
    QueryRequest pending = QueryRequest.builder().tableName(TABLE).indexName("GSI1")
        .keyConditionExpression("GSI1PK = :pk AND begins_with(GSI1SK, :day)")
        .expressionAttributeValues(Map.of(":pk", s("STATUS#PENDING"), ":day", s("2025-03-05")))
        .projectionExpression("PK, SK, GSI1SK, #t")
        .expressionAttributeNames(Map.of("#t", "total"))
        .limit(2).build();
    List<Object> items = new ArrayList<>();
    int pages = 0;
    for (QueryResponse page : ddb.queryPaginator(pending)) {
      pages++;
      page.items().forEach(i -> items.add(item(i)));
    }
    print(obj("op", "QueryPaged", "Items", items, "Pages", pages));

    // Newest first, one page of three by hand, then the next from its LastEvaluatedKey.
    QueryRequest newest = QueryRequest.builder().tableName(TABLE).indexName("GSI1")
        .keyConditionExpression("GSI1PK = :pk")
        .expressionAttributeValues(Map.of(":pk", s("STATUS#PENDING")))
        .scanIndexForward(false).limit(3).build();
    QueryResponse first = ddb.query(newest);
    print(obj("op", "QueryFirstPage", "Items", items(first.items()),
        "LastEvaluatedKey", item(first.lastEvaluatedKey())));
    QueryResponse second = ddb.query(newest.toBuilder().exclusiveStartKey(first.lastEvaluatedKey()).build());
    print(obj("op", "QuerySecondPage", "Items", items(second.items()),
        "LastEvaluatedKey", item(second.lastEvaluatedKey())));

    // Every attribute of an index that projects them all.
    QueryResponse whole = ddb.query(newest.toBuilder().select(Select.ALL_ATTRIBUTES).limit(2).build());
    print(obj("op", "QueryAllAttributes", "Items", items(whole.items())));

    // A filter counted: Limit is applied before it, as DynamoDB does.
    QueryResponse counted = ddb.query(b -> b.tableName(TABLE).indexName("GSI1")
        .keyConditionExpression("GSI1PK = :pk")
        .filterExpression("#t > :min")
        .expressionAttributeNames(Map.of("#t", "total"))
        .expressionAttributeValues(Map.of(":pk", s("STATUS#PENDING"), ":min", n("500")))
        .select(Select.COUNT).limit(40));
    print(obj("op", "QueryCount", "Count", counted.count(), "ScannedCount", counted.scannedCount()));

    // The base table: one item, then two in one batch.
    Map<String, AttributeValue> key = Map.of("PK", first.items().get(0).get("PK"),
        "SK", first.items().get(0).get("SK"));
    GetItemResponse got = ddb.getItem(b -> b.tableName(TABLE).key(key)
        .projectionExpression("PK, SK, GSI1SK, #s").expressionAttributeNames(Map.of("#s", "status")));
    print(obj("op", "GetItem", "Item", item(got.item())));
    Map<String, AttributeValue> other = Map.of("PK", first.items().get(1).get("PK"),
        "SK", first.items().get(1).get("SK"));
    BatchGetItemResponse batch = ddb.batchGetItem(b -> b.requestItems(Map.of(TABLE,
        KeysAndAttributes.builder().keys(key, other).projectionExpression("PK, SK, GSI1SK").build())));
    print(obj("op", "BatchGetItem", "Items", items(batch.responses().get(TABLE)),
        "Unprocessed", batch.unprocessedKeys().size()));

    // A parallel scan of the index, two segments, pages of 50: each segment's items in order.
    List<Object> segments = new ArrayList<>();
    for (int segment = 0; segment < 2; segment++) {
      ScanRequest scan = ScanRequest.builder().tableName(TABLE).indexName("GSI1")
          .segment(segment).totalSegments(2).limit(50).build();
      List<Object> inSegment = new ArrayList<>();
      for (var page : ddb.scanPaginator(scan)) inSegment.addAll(items(page.items()));
      segments.add(inSegment);
    }
    print(obj("op", "ScanSegments", "Segments", segments));

    // Read-your-writes: the applied position of one answer sent back as the next one's minimum.
    QueryResponse withToken = ddb.query(pending.toBuilder().limit(null).build());
    String applied = withToken.sdkHttpResponse().firstMatchingHeader(APPLIED).orElse("");
    QueryResponse waited = ddb.query(pending.toBuilder().limit(null)
        .overrideConfiguration(o -> o.putHeader("x-cdcview-min-position", applied)).build());
    print(obj("op", "MinPosition", "Applied", applied, "Count", waited.count()));

    // Errors, as DynamoDbException with DynamoDB's code, message and status.
    error("ConsistentReadOnIndex", () -> ddb.query(b -> b.tableName(TABLE).indexName("GSI1")
        .keyConditionExpression("GSI1PK = :pk").consistentRead(true)
        .expressionAttributeValues(Map.of(":pk", s("STATUS#PENDING")))));
    error("UnknownTable", () -> ddb.describeTable(b -> b.tableName("Nope")));
    error("PutItem", () -> ddb.putItem(b -> b.tableName(TABLE).item(key)));
    error("BadMinPosition", () -> ddb.query(pending.toBuilder().limit(null)
        .overrideConfiguration(o -> o.putHeader("x-cdcview-min-position", "not-a-token")).build()));
  }

  private static void error(String name, Runnable call) {
    try {
      call.run();
      print(obj("op", "Error:" + name, "Code", "(none: the call succeeded)"));
    } catch (DynamoDbException e) {
      print(obj("op", "Error:" + name, "Code", e.awsErrorDetails().errorCode(),
          "Message", e.awsErrorDetails().errorMessage(), "Status", e.statusCode()));
    }
  }

  private static AttributeValue s(String v) {
    return AttributeValue.fromS(v);
  }

  private static AttributeValue n(String v) {
    return AttributeValue.fromN(v);
  }

  private static List<Object> keySchema(List<KeySchemaElement> schema) {
    List<Object> out = new ArrayList<>();
    for (KeySchemaElement k : schema) out.add(List.of(k.attributeName(), k.keyTypeAsString()));
    return out;
  }

  private static List<Object> items(List<Map<String, AttributeValue>> items) {
    List<Object> out = new ArrayList<>();
    items.forEach(i -> out.add(item(i)));
    return out;
  }

  /** An item (or key) in DynamoDB's JSON, as boto3's low-level client returns it. */
  private static Map<String, Object> item(Map<String, AttributeValue> item) {
    Map<String, Object> out = new TreeMap<>();
    item.forEach((k, v) -> out.put(k, value(v)));
    return out;
  }

  private static Map<String, Object> value(AttributeValue v) {
    switch (v.type()) {
      case S: return obj("S", v.s());
      case N: return obj("N", v.n());
      case B: return obj("B", base64(v.b()));
      case BOOL: return obj("BOOL", v.bool());
      case NUL: return obj("NULL", true);
      case SS: return obj("SS", v.ss());
      case NS: return obj("NS", v.ns());
      case BS: {
        List<Object> out = new ArrayList<>();
        v.bs().forEach(b -> out.add(base64(b)));
        return obj("BS", out);
      }
      case L: {
        List<Object> out = new ArrayList<>();
        v.l().forEach(e -> out.add(value(e)));
        return obj("L", out);
      }
      case M: return obj("M", item(v.m()));
      default: throw new IllegalStateException("an attribute value of unknown type: " + v);
    }
  }

  private static String base64(SdkBytes b) {
    return Base64.getEncoder().encodeToString(b.asByteArray());
  }

  private static Map<String, Object> obj(Object... kv) {
    Map<String, Object> out = new TreeMap<>();
    for (int i = 0; i < kv.length; i += 2) out.put((String) kv[i], kv[i + 1]);
    return out;
  }

  private static void print(Object o) {
    StringBuilder out = new StringBuilder();
    json(o, out);
    System.out.println(out);
  }

  private static void json(Object o, StringBuilder out) {
    if (o == null) {
      out.append("null");
    } else if (o instanceof String str) {
      out.append('"');
      for (char c : str.toCharArray()) {
        if (c == '"' || c == '\\') out.append('\\').append(c);
        else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
        else out.append(c);
      }
      out.append('"');
    } else if (o instanceof Number || o instanceof Boolean) {
      out.append(o);
    } else if (o instanceof Map<?, ?> map) {
      out.append('{');
      boolean firstEntry = true;
      for (Map.Entry<?, ?> e : map.entrySet()) {
        if (!firstEntry) out.append(',');
        firstEntry = false;
        json(e.getKey().toString(), out);
        out.append(':');
        json(e.getValue(), out);
      }
      out.append('}');
    } else if (o instanceof List<?> list) {
      out.append('[');
      for (int i = 0; i < list.size(); i++) {
        if (i > 0) out.append(',');
        json(list.get(i), out);
      }
      out.append(']');
    } else {
      throw new IllegalStateException("cannot print " + o.getClass());
    }
  }
}
