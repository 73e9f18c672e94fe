package cdcview.peer;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;

/**
 * The values this application keeps and sends, and their serdes. Every value carries `ts`, the
 * Kafka timestamp of the change event it comes from (set by the producer), so the store update
 * that makes it visible can be timed (see Lag).
 */
final class Records {
  private Records() {}

  /** An item as the items table holds it: its last sequence number, and its image or none. */
  record ItemState(long ts, String seq, ObjectNode image) {}

  /** A view entry's value: the projected item. */
  record EntryValue(long ts, ObjectNode item) {}

  /** What one item contributes to an aggregate group: per measure its N value (or null). */
  record Contribution(long ts, String[] values) {}

  /** A physical group: members, and per measure the count of N values and their exact sum. */
  static final class GroupState {
    long members;
    final long[] counts;
    final BigDecimal[] sums;

    GroupState(int measures) {
      counts = new long[measures];
      sums = new BigDecimal[measures];
      java.util.Arrays.fill(sums, BigDecimal.ZERO);
    }
  }

  static Serde<ItemState> itemStateSerde() {
    Serializer<ItemState> ser = (topic, s) -> {
      if (s == null) {
        return null;
      }
      byte[] seq = s.seq().getBytes(StandardCharsets.UTF_8);
      byte[] image = s.image() == null ? new byte[0] : json(s.image());
      ByteBuffer b = ByteBuffer.allocate(8 + 1 + 1 + seq.length + image.length);
      b.putLong(s.ts()).put((byte) (s.image() == null ? 0 : 1)).put((byte) seq.length).put(seq)
          .put(image);
      return b.array();
    };
    Deserializer<ItemState> de = (topic, data) -> {
      if (data == null) {
        return null;
      }
      ByteBuffer b = ByteBuffer.wrap(data);
      long ts = b.getLong();
      boolean present = b.get() == 1;
      byte[] seq = new byte[b.get() & 0xFF];
      b.get(seq);
      ObjectNode image = present ? parse(data, b.position()) : null;
      return new ItemState(ts, new String(seq, StandardCharsets.UTF_8), image);
    };
    return Serdes.serdeFrom(ser, de);
  }

  static Serde<EntryValue> entrySerde() {
    Serializer<EntryValue> ser = (topic, e) -> {
      if (e == null) {
        return null;
      }
      byte[] item = json(e.item());
      return ByteBuffer.allocate(8 + item.length).putLong(e.ts()).put(item).array();
    };
    Deserializer<EntryValue> de = (topic, data) -> data == null ? null
        : new EntryValue(ByteBuffer.wrap(data).getLong(), parse(data, 8));
    return Serdes.serdeFrom(ser, de);
  }

  static Serde<Contribution> contributionSerde() {
    Serializer<Contribution> ser = (topic, c) -> {
      if (c == null) {
        return null;
      }
      ByteArrayOutputStream bytes = new ByteArrayOutputStream(32);
      try (DataOutputStream out = new DataOutputStream(bytes)) {
        out.writeLong(c.ts());
        out.writeByte(c.values().length);
        for (String v : c.values()) {
          out.writeBoolean(v != null);
          if (v != null) {
            out.writeUTF(v);
          }
        }
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return bytes.toByteArray();
    };
    Deserializer<Contribution> de = (topic, data) -> {
      if (data == null) {
        return null;
      }
      try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(data))) {
        long ts = in.readLong();
        String[] values = new String[in.readByte()];
        for (int i = 0; i < values.length; i++) {
          values[i] = in.readBoolean() ? in.readUTF() : null;
        }
        return new Contribution(ts, values);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    };
    return Serdes.serdeFrom(ser, de);
  }

  static Serde<GroupState> groupSerde() {
    Serializer<GroupState> ser = (topic, g) -> {
      if (g == null) {
        return null;
      }
      ByteArrayOutputStream bytes = new ByteArrayOutputStream(32);
      try (DataOutputStream out = new DataOutputStream(bytes)) {
        out.writeLong(g.members);
        out.writeByte(g.counts.length);
        for (int i = 0; i < g.counts.length; i++) {
          out.writeLong(g.counts[i]);
          out.writeUTF(g.sums[i].toPlainString());
        }
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return bytes.toByteArray();
    };
    Deserializer<GroupState> de = (topic, data) -> {
      if (data == null) {
        return null;
      }
      try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(data))) {
        long members = in.readLong();
        GroupState g = new GroupState(in.readByte());
        g.members = members;
        for (int i = 0; i < g.counts.length; i++) {
          g.counts[i] = in.readLong();
          g.sums[i] = new BigDecimal(in.readUTF());
        }
        return g;
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    };
    return Serdes.serdeFrom(ser, de);
  }

  static byte[] json(ObjectNode node) {
    try {
      return Values.JSON.writeValueAsBytes(node);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  static ObjectNode parse(byte[] data, int offset) {
    try {
      return (ObjectNode) Values.JSON.readTree(data, offset, data.length - offset);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
