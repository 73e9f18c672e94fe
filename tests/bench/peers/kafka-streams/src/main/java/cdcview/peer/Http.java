package cdcview.peer;

import cdcview.peer.Records.EntryValue;
import cdcview.peer.Records.GroupState;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.common.utils.Utils;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.query.KeyQuery;
import org.apache.kafka.streams.query.QueryResult;
import org.apache.kafka.streams.query.RangeQuery;
import org.apache.kafka.streams.query.StateQueryRequest;
import org.apache.kafka.streams.query.StateQueryResult;
import org.apache.kafka.streams.state.KeyValueIterator;

/**
 * The peer's HTTP interface, every read an interactive query (IQv2) on the local stores:
 *
 * <pre>
 *   GET /point?view=V&amp;pk=J&amp;sk=J&amp;tpk=J&amp;tsk=J  one entry by its whole key (KeyQuery on its partition)
 *   GET /range?view=V&amp;pk=J[&amp;limit=100]       the first entries of a view partition in sort-key order
 *                                           (RangeQuery on every partition, merged; a write-sharded
 *                                           view's logical key reads its shards)
 *   GET /dump?view=V                        every entry of a view, in key order (for the check)
 *   GET /aggregates?name=A                  every group of an aggregate, shards listed
 *   GET /progress                           counters, input positions, committed offsets, caught_up
 *   GET /lag                                the lag histogram (Lag)
 * </pre>
 *
 * J is a typed JSON value, {"S":"x"} or {"N":"1.5"}. Entries are [pk, sk, item] (sk null for a
 * view without sort key). The JDK's HttpServer with its default executor (one thread).
 */
final class Http {
  private final KafkaStreams streams;
  private final Admin admin;
  private final String applicationId;
  private final List<String> topics;
  private final int partitions;
  private final HttpServer server;
  private volatile List<TopicPartition> repartition = List.of();

  Http(KafkaStreams streams, Admin admin, String applicationId, List<String> topics,
       int partitions, int port) throws IOException {
    this.streams = streams;
    this.admin = admin;
    this.applicationId = applicationId;
    this.topics = topics;
    this.partitions = partitions;
    server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 0);
    route("/point", this::point);
    route("/range", this::range);
    route("/dump", this::dump);
    route("/aggregates", this::aggregates);
    route("/progress", q -> progress());
    route("/lag", q -> PeerMain.lag.json());
  }

  void start() {
    server.start();
  }

  void stop() {
    server.stop(0);
  }

  int port() {
    return server.getAddress().getPort();
  }

  interface Handler {
    String handle(Map<String, String> query) throws Exception;
  }

  /** An answer's status: 400 for a bad request, 503 while the stores are not queryable. */
  static final class Failure extends RuntimeException {
    final int status;

    Failure(int status, String message) {
      super(message);
      this.status = status;
    }
  }

  private void route(String path, Handler handler) {
    server.createContext(path, exchange -> {
      int status = 200;
      String body;
      try {
        body = handler.handle(query(exchange));
      } catch (Failure f) {
        status = f.status;
        body = error(f.getMessage());
      } catch (Exception e) {
        status = 500;
        body = error(e.toString());
      }
      byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
      exchange.getResponseHeaders().set("Content-Type", "application/json");
      exchange.sendResponseHeaders(status, bytes.length);
      try (OutputStream out = exchange.getResponseBody()) {
        out.write(bytes);
      }
    });
  }

  private static String error(String message) {
    ObjectNode o = Values.NODES.objectNode();
    o.put("error", message);
    return o.toString();
  }

  private static Map<String, String> query(HttpExchange exchange) {
    Map<String, String> out = new HashMap<>();
    String raw = exchange.getRequestURI().getRawQuery();
    if (raw == null) {
      return out;
    }
    for (String pair : raw.split("&")) {
      int eq = pair.indexOf('=');
      if (eq > 0) {
        out.put(URLDecoder.decode(pair.substring(0, eq), StandardCharsets.UTF_8),
            URLDecoder.decode(pair.substring(eq + 1), StandardCharsets.UTF_8));
      }
    }
    return out;
  }

  private static Spec.View view(Map<String, String> q) {
    Spec.View v = Spec.view(q.getOrDefault("view", ""));
    if (v == null) {
      throw new Failure(400, "unknown view \"" + q.get("view") + "\"; views: " + PeerMain.names());
    }
    return v;
  }

  private static JsonNode typedParam(Map<String, String> q, String name) throws IOException {
    String text = q.get(name);
    if (text == null) {
      throw new Failure(400, "missing parameter " + name + " (a typed JSON value, {\"S\":\"x\"})");
    }
    JsonNode v = Values.JSON.readTree(text);
    if (Values.typeOf(v).equals("N")) {
      return Values.typed("N", Values.canonicalNumber(Values.textOf(v)));
    }
    return v;
  }

  // ------------------------------------------------------------------ queries

  private String point(Map<String, String> q) throws Exception {
    Spec.View view = view(q);
    ByteArrayOutputStream key = new ByteArrayOutputStream(64);
    Values.encodeKey(key, typedParam(q, "pk"));
    if (view.hasSortKey()) {
      Values.encodeKey(key, typedParam(q, "sk"));
    }
    Values.encodeKey(key, typedParam(q, "tpk"));
    Values.encodeKey(key, typedParam(q, "tsk"));
    Bytes k = Bytes.wrap(key.toByteArray());
    // The partition the repartition topic's default partitioner gave the key.
    int partition = Utils.toPositive(Utils.murmur2(k.get())) % partitions;
    StateQueryResult<EntryValue> result = streams.query(
        StateQueryRequest.inStore("view-" + view.name())
            .withQuery(KeyQuery.<Bytes, EntryValue>withKey(k))
            .withPartitions(Set.of(partition)));
    QueryResult<EntryValue> r = result.getPartitionResults().get(partition);
    check(r, view.name());
    ArrayNode out = Values.NODES.arrayNode();
    if (r.getResult() != null) {
      out.add(entryJson(view, k.get(), r.getResult()));
    }
    return "{\"entries\":" + out + "}";
  }

  private String range(Map<String, String> q) throws Exception {
    Spec.View view = view(q);
    JsonNode pk = typedParam(q, "pk");
    int limit = Integer.parseInt(q.getOrDefault("limit", "100"));
    List<byte[]> prefixes = new ArrayList<>();
    if (view.shards() > 0 && !view.isPhysical(Values.textOf(pk))) {
      for (int s = 0; s < view.shards(); s++) {
        prefixes.add(encoded(Values.typed("S", view.physicalKey(Values.textOf(pk), s))));
      }
    } else {
      prefixes.add(encoded(pk));
    }
    // Every prefix's first `limit` entries, ordered by what follows the partition key.
    List<Object[]> rows = new ArrayList<>();
    for (byte[] prefix : prefixes) {
      for (Map.Entry<Bytes, EntryValue> e : scan(view.name(), prefix, limit).entrySet()) {
        byte[] key = e.getKey().get();
        rows.add(new Object[] {
            Bytes.wrap(java.util.Arrays.copyOfRange(key, prefix.length, key.length)), key,
            e.getValue()});
      }
    }
    rows.sort((a, b) -> ((Bytes) a[0]).compareTo((Bytes) b[0]));
    ArrayNode out = Values.NODES.arrayNode();
    for (int i = 0; i < rows.size() && i < limit; i++) {
      out.add(entryJson(view, (byte[]) rows.get(i)[1], (EntryValue) rows.get(i)[2]));
    }
    return "{\"entries\":" + out + "}";
  }

  private static byte[] encoded(JsonNode value) {
    ByteArrayOutputStream out = new ByteArrayOutputStream(32);
    Values.encodeKey(out, value);
    return out.toByteArray();
  }

  /**
   * The first `limit` entries (all if 0) whose keys begin with `prefix` (every key if empty),
   * from every partition of store "view-NAME", in key order.
   */
  private TreeMap<Bytes, EntryValue> scan(String view, byte[] prefix, int limit) {
    RangeQuery<Bytes, EntryValue> query;
    if (prefix.length == 0) {
      query = RangeQuery.withNoBounds();
    } else {
      // Keys beginning with the prefix: every later component starts with a tag byte below
      // 0xFF, so prefix · 0xFF is above all of them (the upper bound is inclusive).
      byte[] upper = java.util.Arrays.copyOf(prefix, prefix.length + 1);
      upper[prefix.length] = (byte) 0xFF;
      query = RangeQuery.withRange(Bytes.wrap(prefix), Bytes.wrap(upper));
    }
    StateQueryResult<KeyValueIterator<Bytes, EntryValue>> result =
        streams.query(StateQueryRequest.inStore("view-" + view).withQuery(query));
    TreeMap<Bytes, EntryValue> out = new TreeMap<>();
    for (QueryResult<KeyValueIterator<Bytes, EntryValue>> r :
        result.getPartitionResults().values()) {
      check(r, view);
      try (KeyValueIterator<Bytes, EntryValue> it = r.getResult()) {
        for (int n = 0; it.hasNext() && (limit == 0 || n < limit); n++) {
          var kv = it.next();
          out.put(kv.key, kv.value);
        }
      }
    }
    while (limit > 0 && out.size() > limit) {
      out.pollLastEntry();
    }
    return out;
  }

  private <V> TreeMap<Bytes, V> scanAll(String store) {
    StateQueryResult<KeyValueIterator<Bytes, V>> result = streams.query(
        StateQueryRequest.inStore(store).withQuery(RangeQuery.<Bytes, V>withNoBounds()));
    TreeMap<Bytes, V> out = new TreeMap<>();
    for (QueryResult<KeyValueIterator<Bytes, V>> r : result.getPartitionResults().values()) {
      check(r, store);
      try (KeyValueIterator<Bytes, V> it = r.getResult()) {
        it.forEachRemaining(kv -> out.put(kv.key, kv.value));
      }
    }
    return out;
  }

  private void check(QueryResult<?> r, String store) {
    if (r == null) {
      throw new Failure(503, store + ": no answer from its partition (state "
          + streams.state() + ")");
    }
    if (r.isFailure()) {
      throw new Failure(503, store + ": " + r.getFailureReason() + ": " + r.getFailureMessage());
    }
  }

  private static ArrayNode entryJson(Spec.View view, byte[] key, EntryValue value) {
    List<JsonNode> parts = Values.decodeKey(key, new int[] {0}, view.hasSortKey() ? 2 : 1);
    ArrayNode row = Values.NODES.arrayNode();
    row.add(parts.get(0));
    if (view.hasSortKey()) {
      row.add(parts.get(1));
    } else {
      row.addNull();
    }
    row.add(value.item());
    return row;
  }

  private String dump(Map<String, String> q) {
    Spec.View view = view(q);
    if (streams.state() != KafkaStreams.State.RUNNING) {
      throw new Failure(503, "not RUNNING but " + streams.state());
    }
    ArrayNode out = Values.NODES.arrayNode();
    for (Map.Entry<Bytes, EntryValue> e : scan(view.name(), new byte[0], 0).entrySet()) {
      out.add(entryJson(view, e.getKey().get(), e.getValue()));
    }
    return "{\"entries\":" + out + "}";
  }

  // ------------------------------------------------------------------ aggregates

  private String aggregates(Map<String, String> q) {
    Spec.Aggregate agg = Spec.aggregate(q.getOrDefault("name", ""));
    if (agg == null) {
      throw new Failure(400, "unknown aggregate \"" + q.get("name") + "\"");
    }
    boolean sharded = !agg.stripShardSuffix().isEmpty();
    TreeMap<Bytes, GroupState> groups = scanAll("agg-" + agg.name());
    List<String> extremes = agg.extremeAttributes();
    List<TreeMap<Bytes, Long>> multisets = new ArrayList<>();
    for (int j = 0; j < extremes.size(); j++) {
      multisets.add(scanAll("aggm-" + agg.name() + "-" + j));
    }
    ArrayNode out = Values.NODES.arrayNode();
    byte[] logical = null;
    JsonNode logicalValue = null;
    List<Object[]> shards = new ArrayList<>();  // {physical text or null, GroupState, min[], max[]}
    for (Map.Entry<Bytes, GroupState> e : groups.entrySet()) {
      byte[] key = e.getKey().get();
      int[] offset = {0};
      JsonNode value = Values.decodeKey(key, offset, 1).get(0);
      byte[] thisLogical = java.util.Arrays.copyOf(key, offset[0]);
      if (logical != null && !java.util.Arrays.equals(logical, thisLogical)) {
        out.add(group(agg, logicalValue, shards, sharded));
        shards.clear();
      }
      logical = thisLogical;
      logicalValue = value;
      String physical = null;
      if (sharded) {
        physical = Values.textOf(value);
        if (key[offset[0]] == 1) {
          long shard = ((key[offset[0] + 1] & 0xFFL) << 24) | ((key[offset[0] + 2] & 0xFFL) << 16)
              | ((key[offset[0] + 3] & 0xFFL) << 8) | (key[offset[0] + 4] & 0xFFL);
          physical = physical + agg.stripShardSuffix().replace("{shard}", Long.toString(shard));
        }
      }
      BigDecimal[] min = new BigDecimal[extremes.size()];
      BigDecimal[] max = new BigDecimal[extremes.size()];
      for (int j = 0; j < extremes.size(); j++) {
        byte[] prefix = java.util.Arrays.copyOf(key, key.length + 1);
        prefix[key.length] = (byte) j;
        byte[] upper = java.util.Arrays.copyOf(prefix, prefix.length + 1);
        upper[prefix.length] = (byte) 0xFF;
        var range = multisets.get(j).subMap(Bytes.wrap(prefix), true, Bytes.wrap(upper), true);
        if (!range.isEmpty()) {
          min[j] = number(range.firstKey().get(), prefix.length);
          max[j] = number(range.lastKey().get(), prefix.length);
        }
      }
      shards.add(new Object[] {physical, e.getValue(), min, max});
    }
    if (logical != null) {
      out.add(group(agg, logicalValue, shards, sharded));
    }
    return "{\"groups\":" + out + "}";
  }

  private static BigDecimal number(byte[] key, int offset) {
    return new BigDecimal(Values.textOf(Values.decodeKey(key, new int[] {offset}, 1).get(0)));
  }

  /** [group, members, {measure: text or null}, [[physical, members, measures], ...]]. */
  private static ArrayNode group(Spec.Aggregate agg, JsonNode value, List<Object[]> shards,
                                 boolean sharded) {
    int n = agg.measures().size();
    GroupState total = new GroupState(n);
    List<String> extremes = agg.extremeAttributes();
    BigDecimal[] min = new BigDecimal[extremes.size()];
    BigDecimal[] max = new BigDecimal[extremes.size()];
    ArrayNode shardList = Values.NODES.arrayNode();
    for (Object[] s : shards) {
      GroupState g = (GroupState) s[1];
      BigDecimal[] smin = (BigDecimal[]) s[2];
      BigDecimal[] smax = (BigDecimal[]) s[3];
      total.members += g.members;
      for (int i = 0; i < n; i++) {
        total.counts[i] += g.counts[i];
        total.sums[i] = total.sums[i].add(g.sums[i]);
      }
      for (int j = 0; j < extremes.size(); j++) {
        if (smin[j] != null && (min[j] == null || smin[j].compareTo(min[j]) < 0)) {
          min[j] = smin[j];
        }
        if (smax[j] != null && (max[j] == null || smax[j].compareTo(max[j]) > 0)) {
          max[j] = smax[j];
        }
      }
      if (sharded) {
        ArrayNode row = Values.NODES.arrayNode();
        row.add((String) s[0]);
        row.add(g.members);
        row.add(measures(agg, g, smin, smax));
        shardList.add(row);
      }
    }
    ArrayNode row = Values.NODES.arrayNode();
    row.add(value);
    row.add(total.members);
    row.add(measures(agg, total, min, max));
    row.add(shardList);
    return row;
  }

  private static final MathContext AVG = new MathContext(38, RoundingMode.HALF_EVEN);

  private static ObjectNode measures(Spec.Aggregate agg, GroupState g, BigDecimal[] min,
                                     BigDecimal[] max) {
    ObjectNode out = Values.NODES.objectNode();
    List<String> extremes = agg.extremeAttributes();
    for (int i = 0; i < agg.measures().size(); i++) {
      Spec.Measure m = agg.measures().get(i);
      String text = null;
      switch (m.kind()) {
        case COUNT:
          text = Long.toString(g.members);
          break;
        case SUM:
          text = g.counts[i] == 0 ? null : Values.canonicalNumber(g.sums[i].toPlainString());
          break;
        case AVG:
          text = g.counts[i] == 0 ? null : Values.canonicalNumber(
              g.sums[i].divide(BigDecimal.valueOf(g.counts[i]), AVG).toPlainString());
          break;
        case MIN:
        case MAX: {
          BigDecimal v = (m.kind() == Spec.MeasureKind.MIN ? min : max)[extremes.indexOf(m.attribute())];
          text = v == null ? null : Values.canonicalNumber(v.toPlainString());
          break;
        }
        default:
          break;
      }
      if (text == null) {
        out.putNull(m.name());
      } else {
        out.put(m.name(), text);
      }
    }
    return out;
  }

  // ------------------------------------------------------------------ progress

  /**
   * caught_up: every input partition's committed offset is at its end (what was read is
   * processed and committed, its repartition records written), every record sent to a
   * repartition topic is applied to its store, and every repartition partition's committed
   * offset is at least its end less one (the commit marker of the producer's last transaction),
   * a partition with no committed offset yet counting as at 0. The commit is what matters to a
   * range query: it flushes the record cache to RocksDB, and IQv2 answers a RangeQuery from
   * RocksDB alone (only a KeyQuery reads the cache).
   */
  private String progress() throws Exception {
    boolean running = streams.state() == KafkaStreams.State.RUNNING;
    ObjectNode o = Values.NODES.objectNode();
    o.put("state", streams.state().toString());
    o.put("processed", PeerMain.processed.sum());
    o.put("rejected", PeerMain.rejected.sum());
    o.put("mapped", PeerMain.mapped.sum());
    o.put("applied", PeerMain.applied.sum());
    o.put("first_processed_ms", PeerMain.firstProcessedMs.get());
    ObjectNode positions = o.putObject("input_positions");
    new TreeMap<>(PeerMain.inputPositions).forEach(positions::put);
    Map<TopicPartition, OffsetAndMetadata> committed = admin
        .listConsumerGroupOffsets(applicationId).partitionsToOffsetAndMetadata()
        .get(10, TimeUnit.SECONDS);
    Map<TopicPartition, OffsetSpec> want = new HashMap<>();
    for (TopicPartition tp : committed.keySet()) {
      want.put(tp, OffsetSpec.latest());
    }
    for (String topic : topics) {
      for (int p = 0; p < partitions; p++) {
        want.put(new TopicPartition(topic, p), OffsetSpec.latest());
      }
    }
    for (TopicPartition tp : repartitionPartitions()) {
      want.put(tp, OffsetSpec.latest());
    }
    Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends =
        admin.listOffsets(want).all().get(10, TimeUnit.SECONDS);
    boolean caughtUp = PeerMain.mapped.sum() == PeerMain.applied.sum() && running
        && !repartition.isEmpty();
    ObjectNode offsets = o.putObject("offsets");
    List<TopicPartition> sorted = new ArrayList<>(ends.keySet());
    sorted.sort((a, b) -> a.toString().compareTo(b.toString()));
    for (TopicPartition tp : sorted) {
      long end = ends.get(tp).offset();
      OffsetAndMetadata c = committed.get(tp);
      long at = c == null ? 0 : c.offset();
      boolean input = topics.contains(tp.topic());
      if (input ? at < end : at < end - 1) {
        caughtUp = false;
      }
      ArrayNode pair = offsets.putArray(tp.topic() + "/" + tp.partition());
      pair.add(at);
      pair.add(end);
    }
    o.put("caught_up", caughtUp);
    return o.toString();
  }

  /**
   * The partitions of the application's repartition topics (Kafka Streams creates them all before
   * it first reaches RUNNING, so the list is read once, then kept).
   */
  private List<TopicPartition> repartitionPartitions() throws Exception {
    if (!repartition.isEmpty() || streams.state() != KafkaStreams.State.RUNNING) {
      return repartition;
    }
    String prefix = applicationId + "-";
    List<String> names = new ArrayList<>();
    for (String name : admin.listTopics().names().get(10, TimeUnit.SECONDS)) {
      if (name.startsWith(prefix) && name.endsWith("-repartition")) {
        names.add(name);
      }
    }
    List<TopicPartition> out = new ArrayList<>();
    admin.describeTopics(names).allTopicNames().get(10, TimeUnit.SECONDS).forEach((name, d) ->
        d.partitions().forEach(p -> out.add(new TopicPartition(name, p.partition()))));
    repartition = List.copyOf(out);
    return repartition;
  }
}
