package cdcview.peer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayOutputStream;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

/**
 * DynamoDB values in "typed JSON" ({"S": "x"}, {"N": "1.5"}, ...) and an order-preserving byte
 * encoding of key values, so that RocksDB's byte order is the view's key order (S and B by
 * bytes, N by numeric value) and a range of keys is one partition of a view.
 *
 * <p>Key encoding, per component: a type tag (B 0x01, N 0x02, S 0x03); S and B: the bytes with
 * 0x00 escaped as 0x00 0xFF, then 0x00; N: a class byte (negative 0x01, zero 0x02, positive 0x03),
 * then for non-zero values the decimal exponent + 130 as one byte and the digits as nibbles
 * (digit + 1) ended by a 0 nibble; a negative number complements those bytes.
 */
final class Values {
  static final ObjectMapper JSON = new ObjectMapper();
  static final JsonNodeFactory NODES = JsonNodeFactory.instance;

  private Values() {}

  /** DynamoDB's canonical text of a number: plain decimal, no exponent, no extra zeros. */
  static String canonicalNumber(String text) {
    BigDecimal d = new BigDecimal(text.trim());
    if (d.signum() == 0) {
      return "0";
    }
    return d.stripTrailingZeros().toPlainString();
  }

  static ObjectNode typed(String type, String text) {
    ObjectNode n = NODES.objectNode();
    n.put(type, text);
    return n;
  }

  /** A typed value as read from a stream record, with canonical numbers. */
  static JsonNode canonical(JsonNode value) {
    Iterator<Map.Entry<String, JsonNode>> it = value.fields();
    if (!it.hasNext()) {
      throw new IllegalArgumentException("an attribute value without a type: " + value);
    }
    Map.Entry<String, JsonNode> f = it.next();
    switch (f.getKey()) {
      case "N":
        return typed("N", canonicalNumber(f.getValue().asText()));
      case "M": {
        ObjectNode m = NODES.objectNode();
        f.getValue().fields().forEachRemaining(e -> m.set(e.getKey(), canonical(e.getValue())));
        ObjectNode out = NODES.objectNode();
        out.set("M", m);
        return out;
      }
      case "L": {
        ArrayNode l = NODES.arrayNode();
        f.getValue().forEach(v -> l.add(canonical(v)));
        ObjectNode out = NODES.objectNode();
        out.set("L", l);
        return out;
      }
      case "NS": {
        ArrayNode l = NODES.arrayNode();
        f.getValue().forEach(v -> l.add(canonicalNumber(v.asText())));
        ObjectNode out = NODES.objectNode();
        out.set("NS", l);
        return out;
      }
      default:
        return value;
    }
  }

  /** An image (attribute name -> typed value) with canonical numbers. */
  static ObjectNode canonicalItem(JsonNode image) {
    ObjectNode out = NODES.objectNode();
    image.fields().forEachRemaining(e -> out.set(e.getKey(), canonical(e.getValue())));
    return out;
  }

  /** "S", "N", "B", ... of a typed value. */
  static String typeOf(JsonNode value) {
    return value.fieldNames().next();
  }

  /** The text of a scalar typed value. */
  static String textOf(JsonNode value) {
    return value.elements().next().asText();
  }

  // ------------------------------------------------------------------ keys

  static void encodeKey(ByteArrayOutputStream out, JsonNode value) {
    String type = typeOf(value);
    switch (type) {
      case "S":
        encodeBytes(out, 0x03, textOf(value).getBytes(StandardCharsets.UTF_8));
        break;
      case "B":
        encodeBytes(out, 0x01, Base64.getDecoder().decode(textOf(value)));
        break;
      case "N":
        encodeNumber(out, textOf(value));
        break;
      default:
        throw new IllegalArgumentException("not a key type: " + type);
    }
  }

  /** The unterminated encoding of an S prefix: a byte prefix of every S key beginning with it. */
  static void encodeStringPrefix(ByteArrayOutputStream out, String prefix) {
    out.write(0x03);
    for (byte b : prefix.getBytes(StandardCharsets.UTF_8)) {
      out.write(b);
      if (b == 0) {
        out.write(0xFF);
      }
    }
  }

  private static void encodeBytes(ByteArrayOutputStream out, int tag, byte[] bytes) {
    out.write(tag);
    for (byte b : bytes) {
      out.write(b);
      if (b == 0) {
        out.write(0xFF);
      }
    }
    out.write(0);
  }

  static void encodeNumber(ByteArrayOutputStream out, String text) {
    out.write(0x02);
    BigDecimal d = new BigDecimal(text);
    if (d.signum() == 0) {
      out.write(0x02);
      return;
    }
    boolean negative = d.signum() < 0;
    out.write(negative ? 0x01 : 0x03);
    BigDecimal a = d.abs().stripTrailingZeros();
    String digits = a.unscaledValue().toString();
    int adjusted = digits.length() - a.scale() - 1;  // d = d1.d2... x 10^adjusted
    int exponent = adjusted + 130;
    if (exponent < 0 || exponent > 255) {
      throw new IllegalArgumentException("number out of DynamoDB's range: " + text);
    }
    int[] nibbles = new int[digits.length() + 2];
    int n = 0;
    for (int i = 0; i < digits.length(); i++) {
      nibbles[n++] = digits.charAt(i) - '0' + 1;
    }
    nibbles[n++] = 0;  // the terminator
    if (n % 2 == 1) {
      nibbles[n++] = 0;
    }
    int flip = negative ? 0xFF : 0;
    out.write(exponent ^ flip);
    for (int i = 0; i < n; i += 2) {
      out.write(((nibbles[i] << 4) | nibbles[i + 1]) ^ flip);
    }
  }

  /** Decodes `count` key components from `key` starting at `offset[0]` (advanced). */
  static List<JsonNode> decodeKey(byte[] key, int[] offset, int count) {
    List<JsonNode> out = new ArrayList<>(count);
    for (int c = 0; c < count; c++) {
      int tag = key[offset[0]++] & 0xFF;
      if (tag == 0x03 || tag == 0x01) {
        ByteArrayOutputStream raw = new ByteArrayOutputStream();
        while (true) {
          int b = key[offset[0]++] & 0xFF;
          if (b == 0) {
            if (offset[0] < key.length && (key[offset[0]] & 0xFF) == 0xFF) {
              offset[0]++;
              raw.write(0);
              continue;
            }
            break;
          }
          raw.write(b);
        }
        out.add(tag == 0x03
            ? typed("S", raw.toString(StandardCharsets.UTF_8))
            : typed("B", Base64.getEncoder().encodeToString(raw.toByteArray())));
      } else if (tag == 0x02) {
        int cls = key[offset[0]++] & 0xFF;
        if (cls == 0x02) {
          out.add(typed("N", "0"));
          continue;
        }
        int flip = cls == 0x01 ? 0xFF : 0;
        int exponent = (key[offset[0]++] & 0xFF) ^ flip;
        StringBuilder digits = new StringBuilder();
        boolean done = false;
        while (!done) {
          int b = (key[offset[0]++] & 0xFF) ^ flip;
          for (int nibble : new int[] {b >> 4, b & 0x0F}) {
            if (nibble == 0) {
              done = true;
              break;
            }
            digits.append((char) ('0' + nibble - 1));
          }
        }
        int adjusted = exponent - 130;
        BigDecimal value = new BigDecimal(new BigInteger(digits.toString()),
            digits.length() - 1 - adjusted);
        if (flip != 0) {
          value = value.negate();
        }
        out.add(typed("N", canonicalNumber(value.toPlainString())));
      } else {
        throw new IllegalArgumentException("bad key tag " + tag + " at " + (offset[0] - 1));
      }
    }
    return out;
  }

  static String hex(byte[] bytes) {
    StringBuilder sb = new StringBuilder();
    for (byte b : bytes) {
      sb.append(String.format("%02x", b & 0xFF));
    }
    return sb.toString();
  }
}
