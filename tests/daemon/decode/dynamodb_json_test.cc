#include "daemon/decode/dynamodb_json.h"

#include <string>

#include "gtest/gtest.h"

namespace cdcview {
namespace {

// A record with the given eventName and the body of its "dynamodb" object.
std::string Record(const std::string& event_name, const std::string& dynamodb) {
  return R"({"eventID":"e1","eventName":")" + event_name +
         R"(","eventSource":"aws:dynamodb","awsRegion":"us-east-1","dynamodb":{)" + dynamodb +
         "}}";
}

constexpr char kKeys[] = R"("Keys":{"PK":{"S":"USER#1"},"SK":{"S":"PROFILE"}})";

// An INSERT whose NewImage holds PK/SK plus the attribute `x` with the given JSON value.
std::string InsertWith(const std::string& name, const std::string& value_json) {
  return Record("INSERT", std::string(kKeys) +
                              R"(,"NewImage":{"PK":{"S":"USER#1"},"SK":{"S":"PROFILE"},")" +
                              name + "\":" + value_json + "}");
}

AttributeValue Num(const std::string& text) { return AttributeValue::Number(text).value(); }

class DynamoDbJsonTest : public ::testing::Test {
 protected:
  ChangeEvent MustDecode(const std::string& json) {
    absl::StatusOr<ChangeEvent> event = decoder_.Decode(json);
    EXPECT_TRUE(event.ok()) << event.status();
    return event.ok() ? *event : ChangeEvent{};
  }
  // The message of the error Decode must return (INVALID_ARGUMENT).
  std::string ErrorOf(const std::string& json) {
    absl::StatusOr<ChangeEvent> event = decoder_.Decode(json);
    EXPECT_FALSE(event.ok()) << json;
    if (event.ok()) return "";
    EXPECT_EQ(event.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(event.status().message());
  }

  DynamoDbJsonDecoder decoder_;
};

TEST_F(DynamoDbJsonTest, DecodesInsertWithKeysSequenceAndTime) {
  ChangeEvent e = MustDecode(Record(
      "INSERT", std::string(kKeys) +
                    R"(,"NewImage":{"PK":{"S":"USER#1"},"SK":{"S":"PROFILE"},"n":{"N":"7"}},)"
                    R"("SequenceNumber":"100000000000000000015","SizeBytes":120,)"
                    R"("StreamViewType":"NEW_AND_OLD_IMAGES",)"
                    R"("ApproximateCreationDateTime":1740787200)"));
  EXPECT_EQ(e.kind, ChangeEvent::Kind::kInsert);
  EXPECT_EQ(e.keys, (Item{{"PK", AttributeValue::String("USER#1")},
                          {"SK", AttributeValue::String("PROFILE")}}));
  ASSERT_TRUE(e.new_image.has_value());
  EXPECT_EQ(*e.new_image, (Item{{"PK", AttributeValue::String("USER#1")},
                                {"SK", AttributeValue::String("PROFILE")},
                                {"n", Num("7")}}));
  EXPECT_FALSE(e.old_image.has_value());
  EXPECT_EQ(e.sequence_number, "100000000000000000015");
  EXPECT_EQ(e.creation_time_ms, 1740787200000);
  EXPECT_FALSE(e.ttl_delete);
}

TEST_F(DynamoDbJsonTest, DecodesEveryAttributeType) {
  ChangeEvent e = MustDecode(Record(
      "INSERT", std::string(kKeys) + R"(,"NewImage":{)"
                R"("s":{"S":"caf\u00e9 \"q\"\n"},)"
                R"("n":{"N":"01.50"},)"
                R"("b":{"B":"AAEC/w=="},)"
                R"("t":{"BOOL":true},"f":{"BOOL":false},)"
                R"("z":{"NULL":true},)"
                R"("m":{"M":{"a":{"S":"x"},"inner":{"M":{"k":{"N":"-1e2"}}}}},)"
                R"("l":{"L":[{"S":"a"},{"N":"2"},{"L":[]}]},)"
                R"("ss":{"SS":["b","a"]},)"
                R"("ns":{"NS":["10","2.50"]},)"
                R"("bs":{"BS":["YQ==","Yg=="]}})"));
  ASSERT_TRUE(e.new_image.has_value());
  const Item& img = *e.new_image;
  Item expected{
      {"s", AttributeValue::String("caf\xc3\xa9 \"q\"\n")},
      {"n", Num("1.5")},
      {"b", AttributeValue::Binary(std::string("\x00\x01\x02\xff", 4))},
      {"t", AttributeValue::Bool(true)},
      {"f", AttributeValue::Bool(false)},
      {"z", AttributeValue::Null()},
      {"m", AttributeValue::Map(Item{
                {"a", AttributeValue::String("x")},
                {"inner", AttributeValue::Map(Item{{"k", Num("-100")}})}})},
      {"l", AttributeValue::List({AttributeValue::String("a"), Num("2"),
                                  AttributeValue::List({})})},
      {"ss", AttributeValue::StringSet({"a", "b"})},
      {"ns", AttributeValue::NumberSet({"2.5", "10"}).value()},
      {"bs", AttributeValue::BinarySet({"a", "b"})},
  };
  EXPECT_EQ(img, expected);
  EXPECT_EQ(img.at("n").scalar(), "1.5");  // canonical text
  EXPECT_EQ(img.at("z").type(), AttrType::kNull);
  EXPECT_EQ(img.at("ns").type(), AttrType::kNS);
}

TEST_F(DynamoDbJsonTest, DecodesModifyAndRemoveImages) {
  ChangeEvent m = MustDecode(Record(
      "MODIFY", std::string(kKeys) +
                    R"(,"NewImage":{"v":{"N":"2"}},"OldImage":{"v":{"N":"1"}},)"
                    R"("StreamViewType":"NEW_AND_OLD_IMAGES")"));
  EXPECT_EQ(m.kind, ChangeEvent::Kind::kModify);
  EXPECT_EQ(m.new_image, (Item{{"v", Num("2")}}));
  EXPECT_EQ(m.old_image, (Item{{"v", Num("1")}}));

  ChangeEvent r =
      MustDecode(Record("REMOVE", std::string(kKeys) + R"(,"StreamViewType":"KEYS_ONLY")"));
  EXPECT_EQ(r.kind, ChangeEvent::Kind::kRemove);
  EXPECT_FALSE(r.new_image.has_value());
  EXPECT_FALSE(r.old_image.has_value());
  EXPECT_FALSE(r.ttl_delete);
}

TEST_F(DynamoDbJsonTest, DetectsTtlDeletes) {
  const std::string body = std::string(kKeys) + R"(,"OldImage":{"v":{"N":"1"}})";
  auto with_identity = [&](const std::string& principal) {
    return R"({"eventName":"REMOVE","userIdentity":{"type":"Service","principalId":")" +
           principal + R"("},"dynamodb":{)" + body + "}}";
  };
  EXPECT_TRUE(MustDecode(with_identity("dynamodb.amazonaws.com")).ttl_delete);
  EXPECT_FALSE(MustDecode(with_identity("someone.example.com")).ttl_delete);
  EXPECT_FALSE(MustDecode(Record("REMOVE", body)).ttl_delete);
}

TEST_F(DynamoDbJsonTest, ReadsCreationTimeAsSecondsOrIso8601) {
  auto at = [&](const std::string& time_json) {
    return MustDecode(Record("REMOVE", std::string(kKeys) +
                                           R"(,"ApproximateCreationDateTime":)" + time_json))
        .creation_time_ms;
  };
  EXPECT_EQ(at("1740787200"), 1740787200000);
  EXPECT_EQ(at("1740787200.123"), 1740787200123);
  EXPECT_EQ(at("1.7407872e9"), 1740787200000);
  EXPECT_EQ(at(R"("2025-03-01T00:00:00Z")"), 1740787200000);
  EXPECT_EQ(at(R"("2025-03-01T00:00:00.25Z")"), 1740787200250);
  EXPECT_EQ(at(R"("2025-03-01T01:00:00+01:00")"), 1740787200000);
  EXPECT_EQ(MustDecode(Record("REMOVE", kKeys)).creation_time_ms, 0);  // absent: unknown

  EXPECT_EQ(ErrorOf(Record("REMOVE", std::string(kKeys) +
                                         R"(,"ApproximateCreationDateTime":"yesterday")")),
            "dynamodb.ApproximateCreationDateTime: expected an ISO-8601 time like "
            "\"2025-03-01T00:00:00Z\", got \"yesterday\"");
  EXPECT_EQ(ErrorOf(Record("REMOVE", std::string(kKeys) +
                                         R"(,"ApproximateCreationDateTime":-5)")),
            "dynamodb.ApproximateCreationDateTime: expected seconds since the epoch "
            "(0 to 253402300799), got -5");
  EXPECT_EQ(ErrorOf(Record("REMOVE", std::string(kKeys) +
                                         R"(,"ApproximateCreationDateTime":true)")),
            "dynamodb.ApproximateCreationDateTime: expected a number of seconds or an "
            "ISO-8601 string, got boolean");
}

TEST_F(DynamoDbJsonTest, IgnoresUnknownFields) {
  ChangeEvent e = MustDecode(
      R"({"eventVersion":"1.1","tableName":{"deep":[1,{"x":null}]},"eventName":"REMOVE",)"
      R"("dynamodb":{"Extra":[true,false],)" +
      std::string(kKeys) + R"(,"Future":{"a":1}},"trailer":12.5})");
  EXPECT_EQ(e.kind, ChangeEvent::Kind::kRemove);
  EXPECT_EQ(e.keys.size(), 2u);
}

// Copied verbatim from examples/app-stream.ndjson.
constexpr char kSampleRecord[] =
    R"({"eventID":"5831240b001f9aad7767079c309e9117","eventName":"MODIFY","eventSource":"aws:dynamodb","awsRegion":"us-east-1","dynamodb":{"ApproximateCreationDateTime":1740821068,"Keys":{"PK":{"S":"USER#u085"},"SK":{"S":"ORDER#o0050"}},"NewImage":{"GSI1PK":{"S":"STATUS#SHIPPED"},"GSI1SK":{"S":"2025-03-01T08:07:08Z"},"PK":{"S":"USER#u085"},"SK":{"S":"ORDER#o0050"},"created_at":{"S":"2025-03-01T08:07:08Z"},"open_since":{"S":"2025-03-01T08:07:08Z"},"status":{"S":"SHIPPED"},"total":{"N":"2279.59"},"type":{"S":"order"}},"OldImage":{"GSI1PK":{"S":"STATUS#PENDING"},"GSI1SK":{"S":"2025-03-01T08:07:08Z"},"PK":{"S":"USER#u085"},"SK":{"S":"ORDER#o0050"},"created_at":{"S":"2025-03-01T08:07:08Z"},"open_since":{"S":"2025-03-01T08:07:08Z"},"status":{"S":"PENDING"},"total":{"N":"2279.59"},"type":{"S":"order"}},"SequenceNumber":"100000000000000004542","SizeBytes":599,"StreamViewType":"NEW_AND_OLD_IMAGES"}})";

TEST_F(DynamoDbJsonTest, DecodesARecordFromTheSample) {
  ChangeEvent e = MustDecode(kSampleRecord);
  EXPECT_EQ(e.kind, ChangeEvent::Kind::kModify);
  EXPECT_EQ(e.keys, (Item{{"PK", AttributeValue::String("USER#u085")},
                          {"SK", AttributeValue::String("ORDER#o0050")}}));
  ASSERT_TRUE(e.new_image && e.old_image);
  EXPECT_EQ(e.new_image->size(), 9u);
  EXPECT_EQ(e.new_image->at("status"), AttributeValue::String("SHIPPED"));
  EXPECT_EQ(e.old_image->at("status"), AttributeValue::String("PENDING"));
  EXPECT_EQ(e.new_image->at("total"), Num("2279.59"));
  EXPECT_EQ(e.new_image->at("open_since"), AttributeValue::String("2025-03-01T08:07:08Z"));
  EXPECT_EQ(e.sequence_number, "100000000000000004542");
  EXPECT_EQ(e.creation_time_ms, 1740821068000);
  EXPECT_FALSE(e.ttl_delete);
}

TEST_F(DynamoDbJsonTest, ReportsMalformedJson) {
  absl::StatusOr<ChangeEvent> e = decoder_.Decode(R"({"eventName": "INSERT")");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(),
            "malformed JSON: JSON document ended early in the middle of an object or array.");
  EXPECT_TRUE(IsMalformedJson(e.status()));

  EXPECT_EQ(ErrorOf(R"({"eventName": "INSERT", "dynamodb": {"Keys": "x})"),
            "malformed JSON: A string is opened, but never closed.");
  EXPECT_EQ(ErrorOf(R"({"eventName": tru})"),
            "malformed JSON: The JSON element does not have the requested type.");
  EXPECT_EQ(ErrorOf("not json"),
            "malformed JSON: Problem while parsing an atom starting with the letter 'n'");
  EXPECT_EQ(ErrorOf(""), "malformed JSON: Empty: no JSON found");

  // Valid JSON of the wrong shape is a bad record, not malformed JSON.
  absl::StatusOr<ChangeEvent> array = decoder_.Decode("[1]");
  ASSERT_FALSE(array.ok());
  EXPECT_EQ(array.status().message(), "record: expected a JSON object, got array");
  EXPECT_FALSE(IsMalformedJson(array.status()));
}

TEST_F(DynamoDbJsonTest, ReportsEachProblemWithItsPath) {
  EXPECT_EQ(ErrorOf(InsertWith("total", R"({"N":12.5})")),
            "dynamodb.NewImage.total: N value must be a string, got number");
  EXPECT_EQ(ErrorOf(InsertWith("total", R"({"N":"abc"})")),
            "dynamodb.NewImage.total: number \"abc\" is not a valid number");
  EXPECT_EQ(ErrorOf(Record("UPSERT", kKeys)),
            "eventName: expected INSERT, MODIFY or REMOVE, got \"UPSERT\"");
  EXPECT_EQ(ErrorOf(Record("INSERT", R"("NewImage":{"a":{"S":"b"}})")),
            "dynamodb.Keys: is required");
  EXPECT_EQ(ErrorOf(InsertWith("x", R"({"S":"a","N":"1"})")),
            "dynamodb.NewImage.x: attribute value must have exactly one type key, got 2");
  EXPECT_EQ(ErrorOf(InsertWith("x", "{}")),
            "dynamodb.NewImage.x: attribute value must have exactly one type key, got 0");
  EXPECT_EQ(ErrorOf(InsertWith("x", R"({"Q":"a"})")),
            "dynamodb.NewImage.x: unknown attribute type \"Q\"");
  EXPECT_EQ(ErrorOf(Record("REMOVE", R"("Keys":{"PK":{"B":"!!"}})")),
            "dynamodb.Keys.PK: invalid base64");
  EXPECT_EQ(ErrorOf(Record("INSERT", std::string(kKeys) +
                                         R"(,"StreamViewType":"NEW_AND_OLD_IMAGES")")),
            "dynamodb.NewImage: is required for INSERT");
  EXPECT_EQ(ErrorOf(Record("MODIFY", std::string(kKeys) + R"(,"StreamViewType":"KEYS_ONLY")")),
            "dynamodb.NewImage: is required for MODIFY (stream view type KEYS_ONLY carries "
            "no image; use NEW_IMAGE or NEW_AND_OLD_IMAGES)");
  EXPECT_EQ(ErrorOf(Record("REMOVE", std::string(kKeys) + R"(,"SequenceNumber":"12a")")),
            "dynamodb.SequenceNumber: expected decimal digits, got \"12a\"");
}

// A sequence number longer than DynamoDB's would order after every real change of its item;
// leading zeros count as digits too, so no length hides behind them.
TEST_F(DynamoDbJsonTest, SequenceNumbersHaveAtMost40Digits) {
  auto with_sequence = [](const std::string& digits) {
    return Record("REMOVE", std::string(kKeys) + R"(,"SequenceNumber":")" + digits + "\"");
  };
  EXPECT_EQ(ErrorOf(with_sequence(std::string(1000, '9'))),
            "dynamodb.SequenceNumber: expected at most 40 decimal digits (DynamoDB's have 21 to "
            "40), got 1000");
  EXPECT_EQ(ErrorOf(with_sequence(std::string(40, '0') + "1")),
            "dynamodb.SequenceNumber: expected at most 40 decimal digits (DynamoDB's have 21 to "
            "40), got 41");
  EXPECT_EQ(ErrorOf(with_sequence("")), "dynamodb.SequenceNumber: expected decimal digits, got \"\"");
  for (const std::string& ok : {std::string(40, '9'), std::string("100000000000000000015"),
                                std::string("7")}) {
    absl::StatusOr<ChangeEvent> e = decoder_.Decode(with_sequence(ok));
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(e->sequence_number, ok);
  }
}

TEST_F(DynamoDbJsonTest, ReportsMoreProblems) {
  EXPECT_EQ(ErrorOf(R"({"dynamodb":{"Keys":{"PK":{"S":"a"}}}})"), "eventName: is required");
  EXPECT_EQ(ErrorOf(R"({"eventName":"REMOVE"})"), "dynamodb: is required");
  EXPECT_EQ(ErrorOf(R"({"eventName":7})"), "eventName: expected a string, got number");
  EXPECT_EQ(ErrorOf(Record("REMOVE", R"("Keys":{})")), "dynamodb.Keys: must not be empty");
  EXPECT_EQ(ErrorOf(Record("REMOVE", R"("Keys":{"PK":{"BOOL":true}})")),
            "dynamodb.Keys.PK: key attributes must be S, N or B, got BOOL");
  EXPECT_EQ(ErrorOf(Record("REMOVE", R"("Keys":[1])")),
            "dynamodb.Keys: expected an object of attributes, got array");
  EXPECT_EQ(ErrorOf(InsertWith("x", R"("plain")")),
            "dynamodb.NewImage.x: attribute value must be an object like {\"S\": \"text\"}, "
            "got string");
  EXPECT_EQ(ErrorOf(InsertWith("l", R"({"L":[{"S":"a"},{"N":5}]})")),
            "dynamodb.NewImage.l[1]: N value must be a string, got number");
  EXPECT_EQ(ErrorOf(InsertWith("m", R"({"M":{"in":{"BOOL":"yes"}}})")),
            "dynamodb.NewImage.m.in: BOOL value must be a boolean, got string");
  EXPECT_EQ(ErrorOf(InsertWith("z", R"({"NULL":false})")),
            "dynamodb.NewImage.z: NULL value must be true, got false");
  EXPECT_EQ(ErrorOf(InsertWith("ns", R"({"NS":["1","x"]})")),
            "dynamodb.NewImage.ns[1]: number \"x\" is not a valid number");
  EXPECT_EQ(ErrorOf(InsertWith("ss", R"({"SS":"a"})")),
            "dynamodb.NewImage.ss: SS value must be an array, got string");
  EXPECT_EQ(ErrorOf(InsertWith("ss", R"({"SS":["a",1]})")),
            "dynamodb.NewImage.ss[1]: SS member must be a string, got number");
  EXPECT_EQ(ErrorOf(InsertWith("bs", R"({"BS":["YQ==","*"]})")),
            "dynamodb.NewImage.bs[1]: invalid base64");
  EXPECT_EQ(ErrorOf(Record("REMOVE", std::string(kKeys) + R"(,"StreamViewType":"ALL")")),
            "dynamodb.StreamViewType: expected KEYS_ONLY, NEW_IMAGE, OLD_IMAGE or "
            "NEW_AND_OLD_IMAGES, got \"ALL\"");
  EXPECT_EQ(ErrorOf(Record("REMOVE", std::string(kKeys) + R"(,"NewImage":{})")),
            "dynamodb.NewImage: must be absent for REMOVE");
  EXPECT_EQ(ErrorOf(R"({"eventName":"REMOVE","userIdentity":"svc","dynamodb":{}})"),
            "userIdentity: expected an object, got string");
}

TEST_F(DynamoDbJsonTest, DecoderIsReusableAfterErrors) {
  EXPECT_FALSE(decoder_.Decode(R"({"eventName": )").ok());
  EXPECT_FALSE(decoder_.Decode(InsertWith("x", R"({"Q":"a"})")).ok());
  ChangeEvent first = MustDecode(kSampleRecord);
  ChangeEvent second = MustDecode(Record("REMOVE", kKeys));
  // The first event owns its strings: decoding the second did not disturb them.
  EXPECT_EQ(first.keys.at("PK"), AttributeValue::String("USER#u085"));
  EXPECT_EQ(second.keys.at("PK"), AttributeValue::String("USER#1"));
}

TEST_F(DynamoDbJsonTest, EncodesItemsAsDynamoDbJson) {
  Item item{
      {"PK", AttributeValue::String("USER#1")},
      {"b", AttributeValue::Binary(std::string("\x00\xff", 2))},
      {"flag", AttributeValue::Bool(false)},
      {"l", AttributeValue::List({AttributeValue::Null(), Num("-0.5")})},
      {"m", AttributeValue::Map(Item{{"q", AttributeValue::String("say \"hi\"\n")}})},
      {"ns", AttributeValue::NumberSet({"1000"}).value()},
      {"ss", AttributeValue::StringSet({"b", "a"})},
      {"bs", AttributeValue::BinarySet({"a"})},
      {"total", Num("9.50")},
  };
  const std::string json = EncodeDynamoDbJson(item);
  EXPECT_EQ(json,
            R"({"PK":{"S":"USER#1"},"b":{"B":"AP8="},"bs":{"BS":["YQ=="]},)"
            R"("flag":{"BOOL":false},"l":{"L":[{"NULL":true},{"N":"-0.5"}]},)"
            R"("m":{"M":{"q":{"S":"say \"hi\"\n"}}},"ns":{"NS":["1000"]},)"
            R"("ss":{"SS":["a","b"]},"total":{"N":"9.5"}})");
  absl::StatusOr<Item> back = decoder_.DecodeItem(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, item);
  EXPECT_EQ(EncodeDynamoDbJson(AttributeValue::String("x")), R"({"S":"x"})");
}

TEST_F(DynamoDbJsonTest, DecodeItemNamesAttributePaths) {
  absl::StatusOr<Item> item = decoder_.DecodeItem(R"({"PK":{"B":"%%"}})");
  ASSERT_FALSE(item.ok());
  EXPECT_EQ(item.status().message(), "PK: invalid base64");
  item = decoder_.DecodeItem(R"({"PK":{"S":"a"},"PK":{"S":"b"}})");
  ASSERT_FALSE(item.ok());
  EXPECT_EQ(item.status().message(), "PK: duplicate attribute name");
}

}  // namespace
}  // namespace cdcview
