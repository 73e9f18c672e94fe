package cdcview.peer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayOutputStream;
import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

/**
 * The App table of examples/cdcview.yaml: its six views and two aggregates, as this application
 * hard-codes them (a Kafka Streams application has its views in code), with the semantics of
 * docs/ARCHITECTURE.md: sparse views (an item without a key attribute of the declared type has
 * no entry), templates over S and N attributes, overloaded rules (the first rule whose `when`
 * holds), the inverted view, write sharding, projections, and aggregates with exact sums.
 */
final class Spec {
  private Spec() {}

  static final String TABLE_PK = "PK";
  static final String TABLE_SK = "SK";

  /** A key component: an attribute of a type, or a template yielding S. */
  record Key(String attribute, String type, List<String[]> template) {
    static Key attr(String name, String type) {
      return new Key(name, type, null);
    }

    /** "{name}" placeholders; parts are {"1", attribute} or {"0", literal}. */
    static Key template(String text) {
      List<String[]> parts = new ArrayList<>();
      StringBuilder literal = new StringBuilder();
      for (int i = 0; i < text.length(); ) {
        char c = text.charAt(i);
        if (c == '{') {
          int end = text.indexOf('}', i);
          if (literal.length() > 0) {
            parts.add(new String[] {"0", literal.toString()});
            literal.setLength(0);
          }
          parts.add(new String[] {"1", text.substring(i + 1, end)});
          i = end + 1;
        } else {
          literal.append(c);
          i++;
        }
      }
      if (literal.length() > 0) {
        parts.add(new String[] {"0", literal.toString()});
      }
      return new Key(null, "S", parts);
    }

    List<String> attributes() {
      List<String> out = new ArrayList<>();
      if (template == null) {
        out.add(attribute);
      } else {
        for (String[] p : template) {
          if (p[0].equals("1")) {
            out.add(p[1]);
          }
        }
      }
      return out;
    }

    /** The key value of `item`, or null when an attribute is missing or of another type. */
    JsonNode value(ObjectNode item) {
      if (template == null) {
        JsonNode v = item.get(attribute);
        return v != null && Values.typeOf(v).equals(type) ? v : null;
      }
      StringBuilder text = new StringBuilder();
      for (String[] p : template) {
        if (p[0].equals("0")) {
          text.append(p[1]);
          continue;
        }
        JsonNode v = item.get(p[1]);
        if (v == null) {
          return null;
        }
        String t = Values.typeOf(v);
        if (!t.equals("S") && !t.equals("N")) {
          return null;
        }
        text.append(Values.textOf(v));
      }
      return Values.typed("S", text.toString());
    }
  }

  /** equals (S text, N numerically, BOOL "true"/"false") or begins_with (S). */
  record Condition(String attribute, boolean equals, String operand) {
    boolean holds(ObjectNode item) {
      JsonNode v = item.get(attribute);
      if (v == null) {
        return false;
      }
      String t = Values.typeOf(v);
      if (!equals) {
        return t.equals("S") && Values.textOf(v).startsWith(operand);
      }
      switch (t) {
        case "S":
          return Values.textOf(v).equals(operand);
        case "N":
          try {
            return new BigDecimal(operand).compareTo(new BigDecimal(Values.textOf(v))) == 0;
          } catch (NumberFormatException e) {
            return false;
          }
        case "BOOL":
          return operand.equals(v.get("BOOL").asBoolean() ? "true" : "false");
        default:
          return false;
      }
    }
  }

  record Rule(List<Condition> when, Key pk, Key sk) {}

  enum Projection { ALL, KEYS_ONLY, INCLUDE }

  /** One entry of a view: its key values and the projected item. */
  record Entry(JsonNode pk, JsonNode sk, ObjectNode item) {}

  record View(String name, List<Rule> rules, Projection projection, List<String> include,
              int shards, String shardSuffix) {
    boolean hasSortKey() {
      return rules.get(0).sk() != null;
    }

    Entry entryOf(ObjectNode item) {
      for (Rule rule : rules) {
        boolean all = true;
        for (Condition c : rule.when()) {
          if (!c.holds(item)) {
            all = false;
            break;
          }
        }
        if (!all) {
          continue;
        }
        JsonNode pk = rule.pk().value(item);
        JsonNode sk = rule.sk() == null ? null : rule.sk().value(item);
        if (pk == null || (rule.sk() != null && sk == null)) {
          return null;
        }
        return new Entry(pk, sk, project(rule, item));
      }
      return null;
    }

    private ObjectNode project(Rule rule, ObjectNode item) {
      if (projection == Projection.ALL) {
        return item;
      }
      Set<String> keep = new LinkedHashSet<>(List.of(TABLE_PK, TABLE_SK));
      keep.addAll(rule.pk().attributes());
      if (rule.sk() != null) {
        keep.addAll(rule.sk().attributes());
      }
      if (projection == Projection.INCLUDE) {
        keep.addAll(include);
      }
      ObjectNode out = Values.NODES.objectNode();
      for (String name : keep) {
        JsonNode v = item.get(name);
        if (v != null) {
          out.set(name, v);
        }
      }
      return out;
    }

    /** enc(view pk) · enc(view sk)? · enc(table pk) · enc(table sk): unique per item. */
    byte[] entryKey(Entry e, ObjectNode item) {
      ByteArrayOutputStream out = new ByteArrayOutputStream(64);
      Values.encodeKey(out, e.pk());
      if (e.sk() != null) {
        Values.encodeKey(out, e.sk());
      }
      Values.encodeKey(out, item.get(TABLE_PK));
      Values.encodeKey(out, item.get(TABLE_SK));
      return out.toByteArray();
    }

    /** The physical partition key `logical` + suffix for shard `shard`. */
    String physicalKey(String logical, int shard) {
      return logical + shardSuffix.replace("{shard}", Integer.toString(shard));
    }

    /** True if `pk` ends with the suffix of a shard below the count (a physical key). */
    boolean isPhysical(String pk) {
      return Shards.split(shardSuffix, pk, shards) != null;
    }
  }

  enum MeasureKind { COUNT, SUM, MIN, MAX, AVG }

  record Measure(MeasureKind kind, String attribute) {
    String name() {
      return kind == MeasureKind.COUNT ? "count"
          : kind.name().toLowerCase() + "(" + attribute + ")";
    }
  }

  record Aggregate(String name, List<Condition> filter, Key groupBy, String stripShardSuffix,
                   List<Measure> measures) {
    /** The attributes whose values a min or max measure needs, each multiset once. */
    List<String> extremeAttributes() {
      List<String> out = new ArrayList<>();
      for (Measure m : measures) {
        if ((m.kind() == MeasureKind.MIN || m.kind() == MeasureKind.MAX)
            && !out.contains(m.attribute())) {
          out.add(m.attribute());
        }
      }
      return out;
    }

    /**
     * The stored group key of a member, enc(logical group) · shard part, or null for an item
     * that is not a member. Shard part: nothing when no suffix is stripped; else 0x00 for a key
     * without the suffix, or 0x01 and the shard number (4 bytes, big-endian).
     */
    byte[] groupKey(ObjectNode item) {
      for (Condition c : filter) {
        if (!c.holds(item)) {
          return null;
        }
      }
      JsonNode value = groupBy.value(item);
      if (value == null) {
        return null;
      }
      ByteArrayOutputStream out = new ByteArrayOutputStream(32);
      if (stripShardSuffix.isEmpty()) {
        Values.encodeKey(out, value);
        return out.toByteArray();
      }
      Object[] split = Shards.split(stripShardSuffix, Values.textOf(value), 0);
      if (split == null) {
        Values.encodeKey(out, value);
        out.write(0);
      } else {
        Values.encodeKey(out, Values.typed("S", (String) split[0]));
        long shard = (Long) split[1];
        out.write(1);
        out.write((int) (shard >>> 24) & 0xFF);
        out.write((int) (shard >>> 16) & 0xFF);
        out.write((int) (shard >>> 8) & 0xFF);
        out.write((int) shard & 0xFF);
      }
      return out.toByteArray();
    }

    /** Per measure, the N value the item contributes (null: count, or no N there). */
    String[] values(ObjectNode item) {
      String[] out = new String[measures.size()];
      for (int i = 0; i < out.length; i++) {
        Measure m = measures.get(i);
        if (m.kind() == MeasureKind.COUNT) {
          continue;
        }
        JsonNode v = item.get(m.attribute());
        if (v != null && Values.typeOf(v).equals("N")) {
          out[i] = Values.textOf(v);
        }
      }
      return out;
    }
  }

  /** Shard suffixes ("#{shard}"): decimal shard numbers without leading zeros. */
  static final class Shards {
    private Shards() {}

    /** {logical, shard (Long)} if `physical` ends with the suffix (shard below `limit`, if > 0). */
    static Object[] split(String suffix, String physical, int limit) {
      int at = suffix.indexOf("{shard}");
      String before = suffix.substring(0, at);
      String after = suffix.substring(at + "{shard}".length());
      if (!physical.endsWith(after)) {
        return null;
      }
      String rest = physical.substring(0, physical.length() - after.length());
      int digits = 0;
      while (digits < rest.length() && digits < 10
          && Character.isDigit(rest.charAt(rest.length() - 1 - digits))) {
        digits++;
      }
      if (digits == 0) {
        return null;
      }
      String number = rest.substring(rest.length() - digits);
      if (number.length() > 1 && number.charAt(0) == '0') {
        return null;
      }
      long shard = Long.parseLong(number);
      if (shard > 0xFFFFFFFFL || (limit > 0 && shard >= limit)) {
        return null;
      }
      rest = rest.substring(0, rest.length() - digits);
      if (!rest.endsWith(before)) {
        return null;
      }
      return new Object[] {rest.substring(0, rest.length() - before.length()), shard};
    }
  }

  private static Condition eq(String attribute, String value) {
    return new Condition(attribute, true, value);
  }

  /** The six views of examples/cdcview.yaml. */
  static final List<View> VIEWS = List.of(
      new View("GSI1", List.of(new Rule(List.of(), Key.attr("GSI1PK", "S"), Key.attr("GSI1SK", "S"))),
          Projection.ALL, List.of(), 0, ""),
      new View("OpenOrders",
          List.of(new Rule(List.of(), Key.template("OPEN"), Key.attr("open_since", "S"))),
          Projection.INCLUDE, List.of("status", "total"), 0, ""),
      new View("ByMember",  // inverted: the table's keys swapped
          List.of(new Rule(List.of(), Key.attr(TABLE_SK, "S"), Key.attr(TABLE_PK, "S"))),
          Projection.KEYS_ONLY, List.of(), 0, ""),
      new View("ByEntity", List.of(
          new Rule(List.of(eq("type", "order")), Key.template("STATUS#{status}"),
              Key.template("{created_at}")),
          new Rule(List.of(eq("type", "user")), Key.template("EMAIL#{email}"),
              Key.attr(TABLE_PK, "S"))),
          Projection.ALL, List.of(), 0, ""),
      new View("ByLocation",
          List.of(new Rule(List.of(), Key.attr("country", "S"), Key.template("{state}#{city}"))),
          Projection.ALL, List.of(), 0, ""),
      new View("ByScore",
          List.of(new Rule(List.of(), Key.attr("board", "S"), Key.attr("score", "N"))),
          Projection.ALL, List.of(), 0, ""),
      new View("VotesByDay",
          List.of(new Rule(List.of(eq("type", "vote")), Key.attr("GSI1PK", "S"),
              Key.attr("GSI1SK", "S"))),
          Projection.KEYS_ONLY, List.of(), 4, "#{shard}"));

  /** The two aggregates of examples/cdcview.yaml. */
  static final List<Aggregate> AGGREGATES = List.of(
      new Aggregate("VotesPerDay", List.of(new Condition("GSI1PK", false, "DAY#")),
          Key.template("{GSI1PK}"), "#{shard}", List.of(new Measure(MeasureKind.COUNT, ""))),
      new Aggregate("OrderTotals", List.of(eq("type", "order")), Key.attr("status", "S"), "",
          List.of(new Measure(MeasureKind.COUNT, ""), new Measure(MeasureKind.SUM, "total"),
              new Measure(MeasureKind.MIN, "total"), new Measure(MeasureKind.MAX, "total"),
              new Measure(MeasureKind.AVG, "total"))));

  static View view(String name) {
    for (View v : VIEWS) {
      if (v.name().equals(name)) {
        return v;
      }
    }
    return null;
  }

  static Aggregate aggregate(String name) {
    for (Aggregate a : AGGREGATES) {
      if (a.name().equals(name)) {
        return a;
      }
    }
    return null;
  }
}
