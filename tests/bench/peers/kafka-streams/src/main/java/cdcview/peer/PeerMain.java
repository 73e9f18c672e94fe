package cdcview.peer;

import cdcview.peer.Records.Contribution;
import cdcview.peer.Records.EntryValue;
import cdcview.peer.Records.GroupState;
import cdcview.peer.Records.ItemState;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayOutputStream;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * cdcview's views and aggregates as a Kafka Streams application (README.md beside pom.xml).
 *
 * <p>Topology: the change events (DynamoDB Streams JSON, keyed by the item's table key) become a
 * KTable of items by table key (groupByKey + aggregate: the last image, or a tombstone, and the
 * last sequence number, so replayed events are skipped as cdcview skips them). Each view is that
 * table re-keyed by the view's entry key (groupBy, through a repartition topic) and aggregated
 * into a RocksDB store "view-NAME" whose keys sort as the view does. Each aggregate is the table
 * grouped by group key into "agg-NAME" (members, counts, exact sums) and, for min/max, by
 * (group, value) into a counted multiset "aggm-NAME-i" whose first and last keys are the extremes.
 * Queries go through interactive queries (IQv2) from a small HTTP server (Http).
 *
 * <p>Usage: PeerMain --bootstrap HOST:PORT --topics T[,T2] --state-dir DIR --port N
 * [--application-id ID]
 */
public final class PeerMain {
  // Progress, for a bench to tell when the application has caught up (Http's /progress).
  static final LongAdder processed = new LongAdder();      // input records seen
  static final LongAdder rejected = new LongAdder();       // input records that did not decode
  static final LongAdder mapped = new LongAdder();         // records sent to repartition topics
  static final LongAdder applied = new LongAdder();        // of those, applied to a store
  static final AtomicLong firstProcessedMs = new AtomicLong();
  static final Map<String, Long> inputPositions = new ConcurrentHashMap<>();  // "topic/p" -> next
  static final Lag lag = new Lag();

  private PeerMain() {}

  public static void main(String[] args) throws Exception {
    Map<String, String> flags = parseFlags(args);
    String bootstrap = required(flags, "bootstrap");
    List<String> topics = Arrays.asList(required(flags, "topics").split(","));
    String stateDir = required(flags, "state-dir");
    int port = Integer.parseInt(required(flags, "port"));
    String applicationId = flags.getOrDefault("application-id", "cdcview-peer");

    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);  // required
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);   // required
    // Not a default: cdcview applies every event exactly once (store and positions commit in
    // one transaction), so the peer is compared at the same guarantee.
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    // Not a default (/tmp/kafka-streams): the bench measures the stores' bytes on disk in a
    // directory of its own, on the same filesystem as cdcview's store.
    props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
    // Everything else is Kafka Streams' documented default: one stream thread, RocksDB stores,
    // a 10 MB record cache, commit.interval.ms 100 (the exactly-once default), no standbys.

    Topology topology = topology(topics);
    System.err.println("[peer] topology:\n" + topology.describe());
    KafkaStreams streams = new KafkaStreams(topology, props);
    streams.setUncaughtExceptionHandler(e -> {
      System.err.println("[peer] stream thread failed: " + e);
      e.printStackTrace();
      return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
          .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
    });
    streams.setStateListener((now, before) ->
        System.err.println("[peer] state " + before + " -> " + now));

    Properties adminProps = new Properties();
    adminProps.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    Admin admin = Admin.create(adminProps);
    int partitions = admin.describeTopics(topics).allTopicNames().get().get(topics.get(0))
        .partitions().size();

    Http http = new Http(streams, admin, applicationId, topics, partitions, port);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      http.stop();
      streams.close();
      admin.close();
    }, "peer-shutdown"));
    streams.start();
    http.start();
    System.err.println("[peer] serving HTTP on 127.0.0.1:" + http.port() + ", topics " + topics
        + ", state in " + stateDir);
  }

  static Topology topology(List<String> topics) {
    StreamsBuilder builder = new StreamsBuilder();
    Serde<ItemState> itemSerde = Records.itemStateSerde();
    Serde<EntryValue> entrySerde = Records.entrySerde();
    Serde<Contribution> contributionSerde = Records.contributionSerde();
    Serde<GroupState> groupSerde = Records.groupSerde();

    // The items, by table key (the message key: PK \0 SK). processValues only prefixes each
    // event with its Kafka timestamp (for the lag) and notes the input offsets (for progress).
    KTable<Bytes, ItemState> items = builder
        .stream(topics, Consumed.with(Serdes.Bytes(), Serdes.ByteArray()))
        .processValues(Stamp::new)
        .groupByKey(Grouped.with(Serdes.Bytes(), Serdes.ByteArray()))
        .aggregate(() -> null, (key, event, state) -> apply(event, state),
            Materialized.<Bytes, ItemState, KeyValueStore<Bytes, byte[]>>as("items")
                .withKeySerde(Serdes.Bytes()).withValueSerde(itemSerde));

    for (Spec.View view : Spec.VIEWS) {
      items
          .groupBy((key, state) -> {
            if (state == null || state.image() == null) {
              return null;  // removed
            }
            Spec.Entry e = view.entryOf(state.image());
            if (e == null) {
              return null;  // sparse: not in this view
            }
            mapped.increment();
            return KeyValue.pair(Bytes.wrap(view.entryKey(e, state.image())),
                new EntryValue(state.ts(), e.item()));
          }, Grouped.with("view-" + view.name(), Serdes.Bytes(), entrySerde))
          .aggregate(() -> null,
              (key, value, old) -> {
                applied.increment();
                lag.record(value.ts());
                return value;
              },
              (key, value, old) -> {
                applied.increment();
                return null;  // deletes the entry
              },
              Materialized.<Bytes, EntryValue, KeyValueStore<Bytes, byte[]>>as("view-" + view.name())
                  .withKeySerde(Serdes.Bytes()).withValueSerde(entrySerde));
    }

    for (Spec.Aggregate agg : Spec.AGGREGATES) {
      int measures = agg.measures().size();
      items
          .groupBy((key, state) -> {
            if (state == null || state.image() == null) {
              return null;
            }
            byte[] group = agg.groupKey(state.image());
            if (group == null) {
              return null;
            }
            mapped.increment();
            return KeyValue.pair(Bytes.wrap(group),
                new Contribution(state.ts(), agg.values(state.image())));
          }, Grouped.with("agg-" + agg.name(), Serdes.Bytes(), contributionSerde))
          .aggregate(() -> new GroupState(measures),
              (key, c, group) -> {
                applied.increment();
                lag.record(c.ts());
                return add(agg, group, c, 1);
              },
              (key, c, group) -> {
                applied.increment();
                GroupState g = add(agg, group, c, -1);
                return g.members == 0 ? null : g;  // the last member left: no group
              },
              Materialized.<Bytes, GroupState, KeyValueStore<Bytes, byte[]>>as("agg-" + agg.name())
                  .withKeySerde(Serdes.Bytes()).withValueSerde(groupSerde));

      List<String> extremes = agg.extremeAttributes();
      for (int j = 0; j < extremes.size(); j++) {
        final int index = j;
        final String attribute = extremes.get(j);
        items
            .groupBy((key, state) -> {
              if (state == null || state.image() == null) {
                return null;
              }
              byte[] group = agg.groupKey(state.image());
              JsonNode v = group == null ? null : state.image().get(attribute);
              if (v == null || !Values.typeOf(v).equals("N")) {
                return null;
              }
              ByteArrayOutputStream k = new ByteArrayOutputStream(group.length + 24);
              k.writeBytes(group);
              k.write(index);
              Values.encodeNumber(k, Values.textOf(v));
              mapped.increment();
              return KeyValue.pair(Bytes.wrap(k.toByteArray()), state.ts());
            }, Grouped.with("aggm-" + agg.name() + "-" + j, Serdes.Bytes(), Serdes.Long()))
            .aggregate(() -> 0L,
                (key, ts, count) -> {
                  applied.increment();
                  lag.record(ts);
                  return count + 1;
                },
                (key, ts, count) -> {
                  applied.increment();
                  return count - 1 == 0 ? null : count - 1;
                },
                Materialized.<Bytes, Long, KeyValueStore<Bytes, byte[]>>as(
                    "aggm-" + agg.name() + "-" + j)
                    .withKeySerde(Serdes.Bytes()).withValueSerde(Serdes.Long()));
      }
    }
    return builder.build();
  }

  /** Prefixes each event with its Kafka timestamp; notes the input positions. */
  static final class Stamp implements FixedKeyProcessor<Bytes, byte[], byte[]> {
    private FixedKeyProcessorContext<Bytes, byte[]> context;

    @Override
    public void init(FixedKeyProcessorContext<Bytes, byte[]> context) {
      this.context = context;
    }

    @Override
    public void process(FixedKeyRecord<Bytes, byte[]> record) {
      firstProcessedMs.compareAndSet(0, System.currentTimeMillis());
      processed.increment();
      context.recordMetadata().ifPresent(m ->
          inputPositions.put(m.topic() + "/" + m.partition(), m.offset() + 1));
      byte[] value = record.value() == null ? new byte[0] : record.value();
      byte[] stamped = ByteBuffer.allocate(8 + value.length).putLong(record.timestamp())
          .put(value).array();
      context.forward(record.withValue(stamped));
    }
  }

  /** One change event applied to an item's state (null: never seen). */
  static ItemState apply(byte[] stamped, ItemState state) {
    try {
      long ts = ByteBuffer.wrap(stamped).getLong();
      JsonNode record = Values.JSON.readTree(stamped, 8, stamped.length - 8);
      JsonNode body = record.get("dynamodb");
      String seq = body.path("SequenceNumber").asText("");
      if (!seq.isEmpty() && state != null && !state.seq().isEmpty()
          && new BigInteger(seq).compareTo(new BigInteger(state.seq())) <= 0) {
        return state;  // an event at or before the last applied one: skipped, as cdcview does
      }
      String kind = record.get("eventName").asText();
      if (kind.equals("REMOVE")) {
        return new ItemState(ts, seq, null);
      }
      ObjectNode keys = Values.canonicalItem(body.get("Keys"));
      ObjectNode image = Values.canonicalItem(body.get("NewImage"));
      keys.fields().forEachRemaining(e -> {
        if (!image.has(e.getKey())) {
          image.set(e.getKey(), e.getValue());
        }
      });
      return new ItemState(ts, seq, image);
    } catch (Exception e) {
      rejected.increment();  // cdcview dead-letters such an event; here it is counted and skipped
      return state;
    }
  }

  /** Adds (sign 1) or retracts (sign -1) a contribution; min/max values are in the multiset. */
  static GroupState add(Spec.Aggregate agg, GroupState g, Contribution c, int sign) {
    g.members += sign;
    for (int i = 0; i < g.counts.length; i++) {
      String v = c.values()[i];
      if (v == null) {
        continue;
      }
      g.counts[i] += sign;
      Spec.MeasureKind kind = agg.measures().get(i).kind();
      if (kind == Spec.MeasureKind.SUM || kind == Spec.MeasureKind.AVG) {
        BigDecimal d = new BigDecimal(v);
        g.sums[i] = sign > 0 ? g.sums[i].add(d) : g.sums[i].subtract(d);
      }
    }
    return g;
  }

  private static Map<String, String> parseFlags(String[] args) {
    Map<String, String> out = new java.util.HashMap<>();
    for (int i = 0; i < args.length; i++) {
      if (!args[i].startsWith("--") || i + 1 >= args.length) {
        usage("bad argument " + args[i]);
      }
      out.put(args[i].substring(2), args[++i]);
    }
    return out;
  }

  private static String required(Map<String, String> flags, String name) {
    String v = flags.get(name);
    if (v == null || v.isEmpty()) {
      usage("missing --" + name);
    }
    return v;
  }

  private static void usage(String why) {
    System.err.println("[peer] " + why + "\nusage: PeerMain --bootstrap HOST:PORT --topics T[,T2]"
        + " --state-dir DIR --port N [--application-id ID]");
    System.exit(2);
  }

  static List<String> names() {
    List<String> out = new ArrayList<>();
    Spec.VIEWS.forEach(v -> out.add(v.name()));
    return out;
  }
}
