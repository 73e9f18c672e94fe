#include "daemon/decode/debezium_json.h"

#include <string>

#include "daemon/decode/dynamodb_json.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

AttributeValue S(const std::string& s) { return AttributeValue::String(s); }
AttributeValue N(const std::string& text) { return AttributeValue::Number(text).value(); }

constexpr char kKey[] = R"({"PK":"USER#1","SK":"PROFILE"})";

class DebeziumJsonTest : public ::testing::Test {
 protected:
  ChangeEvent MustDecode(const std::string& key, const std::string& value) {
    absl::StatusOr<std::optional<ChangeEvent>> event = decoder_.Decode(key, value);
    EXPECT_TRUE(event.ok()) << event.status();
    if (!event.ok()) return {};
    EXPECT_TRUE(event->has_value()) << "decoded as a tombstone: " << value;
    return event->value_or(ChangeEvent{});
  }
  std::string ErrorOf(const std::string& key, const std::string& value) {
    absl::StatusOr<std::optional<ChangeEvent>> event = decoder_.Decode(key, value);
    EXPECT_FALSE(event.ok()) << value;
    if (event.ok()) return "";
    EXPECT_EQ(event.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(event.status().message());
  }

  DebeziumJsonDecoder decoder_;
};

TEST_F(DebeziumJsonTest, CreateMapsEveryJsonTypeToAnAttribute) {
  ChangeEvent e = MustDecode(
      kKey,
      R"({"before":null,"after":{"PK":"USER#1","SK":"PROFILE","total":12.50,"big":12345678901234567890123,)"
      R"("ok":true,"gone":null,"addr":{"city":"Paris","zip":75001},"tags":["a",1,false]},)"
      R"("source":{"connector":"postgresql","ts_ms":1740787200123},"op":"c","ts_ms":1740787201000})");
  EXPECT_EQ(e.kind, ChangeEvent::Kind::kInsert);
  EXPECT_EQ(e.keys, (Item{{"PK", S("USER#1")}, {"SK", S("PROFILE")}}));
  ASSERT_TRUE(e.new_image.has_value());
  Item want{{"PK", S("USER#1")},
            {"SK", S("PROFILE")},
            {"total", N("12.5")},
            {"big", N("12345678901234567890123")},
            {"ok", AttributeValue::Bool(true)},
            {"gone", AttributeValue::Null()},
            {"addr", AttributeValue::Map({{"city", S("Paris")}, {"zip", N("75001")}})},
            {"tags", AttributeValue::List({S("a"), N("1"), AttributeValue::Bool(false)})}};
  EXPECT_EQ(*e.new_image, want);
  EXPECT_FALSE(e.old_image.has_value());
  EXPECT_EQ(e.creation_time_ms, 1740787200123);  // source.ts_ms: when the database changed it
  EXPECT_EQ(e.sequence_number, "");
}

// Debezium's own ordering fields (source.lsn, source.sequence) are per connector, not per
// item: none becomes a sequence number, however long, so no message can make the item's later
// changes look already applied. Order comes from the Kafka partition.
TEST_F(DebeziumJsonTest, ConnectorOrderingFieldsAreNotSequenceNumbers) {
  const std::string huge(1000, '9');
  ChangeEvent e = MustDecode(kKey, R"({"op":"u","before":{"a":1},"after":{"a":2},)"
                                   R"("source":{"lsn":33227720,"sequence":")" + huge +
                                       R"("},"ts_ms":5})");
  EXPECT_EQ(e.sequence_number, "");
  EXPECT_EQ(e.kind, ChangeEvent::Kind::kModify);
}

TEST_F(DebeziumJsonTest, NumbersKeepTheirExactText) {
  ChangeEvent e = MustDecode(kKey, R"({"op":"c","after":{"x":0.1,"y":1E+2,"z":-0.000}})");
  EXPECT_EQ(e.new_image->at("x"), N("0.1"));
  EXPECT_EQ(e.new_image->at("x").scalar(), "0.1");
  EXPECT_EQ(e.new_image->at("y").scalar(), "100");
  EXPECT_EQ(e.new_image->at("z").scalar(), "0");
}

TEST_F(DebeziumJsonTest, OpsMapToKinds) {
  EXPECT_EQ(MustDecode(kKey, R"({"op":"r","after":{"a":1}})").kind, ChangeEvent::Kind::kInsert);
  ChangeEvent u = MustDecode(kKey, R"({"op":"u","before":{"a":1},"after":{"a":2}})");
  EXPECT_EQ(u.kind, ChangeEvent::Kind::kModify);
  EXPECT_EQ(*u.old_image, (Item{{"a", N("1")}}));
  EXPECT_EQ(*u.new_image, (Item{{"a", N("2")}}));
  ChangeEvent d = MustDecode(kKey, R"({"op":"d","before":{"a":2},"after":null,"ts_ms":77})");
  EXPECT_EQ(d.kind, ChangeEvent::Kind::kRemove);
  EXPECT_FALSE(d.new_image.has_value());
  EXPECT_EQ(d.creation_time_ms, 77);  // no source.ts_ms: the envelope's ts_ms
}

TEST_F(DebeziumJsonTest, SchemaWrapperOnValueAndKey) {
  ChangeEvent e = MustDecode(
      R"({"schema":{"type":"struct","fields":[{"field":"PK","type":"string"}]},"payload":{"PK":"P1"}})",
      R"({"schema":{"type":"struct","optional":false,"version":1},)"
      R"("payload":{"before":null,"after":{"PK":"P1","v":3},"op":"c","ts_ms":5}})");
  EXPECT_EQ(e.keys, (Item{{"PK", S("P1")}}));
  EXPECT_EQ(*e.new_image, (Item{{"PK", S("P1")}, {"v", N("3")}}));
  EXPECT_EQ(e.creation_time_ms, 5);
}

TEST_F(DebeziumJsonTest, TombstonesAreNotEvents) {
  for (const std::string value : {"", "  ", "null", R"({"schema":null,"payload":null})"}) {
    absl::StatusOr<std::optional<ChangeEvent>> event = decoder_.Decode(kKey, value);
    ASSERT_TRUE(event.ok()) << value << ": " << event.status();
    EXPECT_FALSE(event->has_value()) << value;
  }
}

TEST_F(DebeziumJsonTest, KeyAttributesComeFromTheImages) {
  DebeziumJsonDecoder decoder({"PK", "SK"});
  auto c = decoder.Decode("", R"({"op":"c","after":{"PK":"A","SK":7,"x":"y"}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->keys, (Item{{"PK", S("A")}, {"SK", N("7")}}));
  auto d = decoder.Decode("ignored", R"({"op":"d","before":{"PK":"A","SK":7},"after":null})");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->keys, (Item{{"PK", S("A")}, {"SK", N("7")}}));

  auto missing = decoder.Decode("", R"({"op":"c","after":{"PK":"A"}})");
  EXPECT_EQ(missing.status().message(), R"(key attribute "SK": is missing from after)");
  auto no_before = decoder.Decode("", R"({"op":"d","before":null})");
  EXPECT_EQ(no_before.status().message(), R"(before: is required for op "d" to read the key attributes)");
  auto bad_type = decoder.Decode("", R"({"op":"c","after":{"PK":true,"SK":1}})");
  EXPECT_EQ(bad_type.status().message(), "after.PK: key attributes must be strings or numbers, got boolean");
}

TEST_F(DebeziumJsonTest, ErrorsNameThePathAndTheProblem) {
  const std::string after = R"("after":{"a":1})";
  EXPECT_EQ(ErrorOf(kKey, R"({"op":"t",)" + after + "}"),
            R"(op: expected "c", "u", "d" or "r", got "t")");
  EXPECT_EQ(ErrorOf(kKey, R"({"schema":{},"payload":{"op":"x"}})"),
            R"(payload.op: expected "c", "u", "d" or "r", got "x")");
  EXPECT_EQ(ErrorOf(kKey, "{" + after + "}"), "op: is required");
  EXPECT_EQ(ErrorOf(kKey, R"({"op":1})"), "op: expected a string, got number");
  EXPECT_EQ(ErrorOf(kKey, R"({"op":"c","after":null})"), R"(after: is required for op "c")");
  EXPECT_EQ(ErrorOf(kKey, R"({"op":"u","after":"x"})"), "after: expected an object or null, got string");
  EXPECT_EQ(ErrorOf(kKey, R"({"op":"d","before":{"a":1},"after":{"a":1}})"),
            R"(after: must be null for op "d")");
  EXPECT_EQ(ErrorOf(kKey, R"({"op":"c","after":{"a":1},"ts_ms":"soon"})"),
            "ts_ms: expected milliseconds since the epoch, got string");
  EXPECT_EQ(ErrorOf(kKey, R"({"op":"c","after":{"a":1},"ts_ms":1.5})"),
            "ts_ms: expected whole milliseconds since the epoch, got 1.5");
  EXPECT_EQ(ErrorOf(kKey, R"([1,2])"), "value: expected a Debezium envelope object, got array");
  EXPECT_EQ(ErrorOf(kKey, R"("text")"), "value: expected a JSON object, got a scalar value");
  EXPECT_EQ(ErrorOf(kKey, R"({"op":"c","after":{"a":1,"a":2}})"), "after.a: duplicate field name");
}

TEST_F(DebeziumJsonTest, OutOfRangeNumbersNameTheirPath) {
  // Valid JSON numbers outside DynamoDB's range are bad records, not malformed JSON.
  std::string message = ErrorOf(kKey, R"({"op":"c","after":{"n":1e999}})");
  EXPECT_EQ(message.rfind("after.n: ", 0), 0u) << message;
  message = ErrorOf(kKey, R"({"op":"c","after":{"m":{"l":[1.00000000000000000000000000000000000001]}}})");
  EXPECT_EQ(message.rfind("after.m.l[0]: ", 0), 0u) << message;
  absl::StatusOr<std::optional<ChangeEvent>> bad = decoder_.Decode(kKey, R"({"op":"c","after":{"n":01}})");
  EXPECT_TRUE(IsMalformedJson(bad.status())) << bad.status();
}

TEST_F(DebeziumJsonTest, KeyErrors) {
  const std::string value = R"({"op":"c","after":{"a":1}})";
  EXPECT_EQ(ErrorOf("", value),
            "key: the message has no key; give the key columns in the source's "
            "kafka.key_attributes");
  EXPECT_EQ(ErrorOf(R"({"PK":true})", value), "key.PK: key attributes must be strings or numbers, got boolean");
  EXPECT_EQ(ErrorOf(R"({"PK":{"S":"x"}})", value), "key.PK: key attributes must be strings or numbers, got object");
  EXPECT_EQ(ErrorOf(R"({})", value), "key: expected an object of key columns, got an empty object");
  EXPECT_EQ(ErrorOf(R"([1])", value), "key: expected an object of key columns, got array");
  EXPECT_EQ(ErrorOf(R"({"schema":{},"payload":"x"})", value),
            "key.payload: expected an object of key columns, got string");
}

TEST_F(DebeziumJsonTest, TruncatedJsonIsMalformed) {
  const std::string full = R"({"op":"c","after":{"PK":"USER#1","SK":"PROFILE","n":5}})";
  for (size_t cut : {size_t{1}, size_t{10}, full.size() - 1}) {
    absl::StatusOr<std::optional<ChangeEvent>> event = decoder_.Decode(kKey, full.substr(0, cut));
    ASSERT_FALSE(event.ok()) << cut;
    EXPECT_TRUE(IsMalformedJson(event.status())) << event.status();
  }
  absl::StatusOr<std::optional<ChangeEvent>> trailing = decoder_.Decode(kKey, full + " x");
  EXPECT_TRUE(IsMalformedJson(trailing.status())) << trailing.status();
  absl::StatusOr<std::optional<ChangeEvent>> key = decoder_.Decode("{\"PK\":", full);
  EXPECT_TRUE(IsMalformedJson(key.status())) << key.status();
}

TEST_F(DebeziumJsonTest, DecoderIsReusable) {
  EXPECT_FALSE(decoder_.Decode(kKey, "{\"op\":").ok());
  ChangeEvent e = MustDecode(kKey, R"({"op":"c","after":{"PK":"USER#1","SK":"PROFILE"}})");
  EXPECT_EQ(e.keys.at("PK"), S("USER#1"));
}

}  // namespace
}  // namespace cdcview
