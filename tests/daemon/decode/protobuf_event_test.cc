#include "daemon/decode/protobuf_event.h"

#include <string>

#include "cdcview/v1/change_event.pb.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

v1::AttributeValue PS(const std::string& s) {
  v1::AttributeValue v;
  v.set_s(s);
  return v;
}
v1::AttributeValue PN(const std::string& n) {
  v1::AttributeValue v;
  v.set_n(n);
  return v;
}

v1::ChangeEvent Insert() {
  v1::ChangeEvent e;
  e.set_kind(v1::ChangeEvent::INSERT);
  (*e.mutable_keys()->mutable_attributes())["PK"] = PS("USER#1");
  auto& image = *e.mutable_new_image()->mutable_attributes();
  image["PK"] = PS("USER#1");
  image["total"] = PN("12.50");
  (*image["tags"].mutable_l()->add_values()) = PS("a");
  (*(*image["addr"].mutable_m()->mutable_fields())["zip"].mutable_ns()->add_values()) = "2";
  image["ok"].set_bool_(true);
  image["none"].set_null(true);
  e.set_sequence_number("42");
  e.set_creation_time_ms(1740787200123);
  return e;
}

std::string ErrorOf(const v1::ChangeEvent& message) {
  absl::StatusOr<ChangeEvent> event = DecodeProtobufEvent(message.SerializeAsString());
  EXPECT_FALSE(event.ok());
  if (event.ok()) return "";
  EXPECT_EQ(event.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(IsMalformedProtobuf(event.status()));
  return std::string(event.status().message());
}

TEST(ProtobufEventTest, DecodesEveryField) {
  absl::StatusOr<ChangeEvent> e = DecodeProtobufEvent(Insert().SerializeAsString());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->kind, ChangeEvent::Kind::kInsert);
  EXPECT_EQ(e->keys, (Item{{"PK", AttributeValue::String("USER#1")}}));
  Item want{{"PK", AttributeValue::String("USER#1")},
            {"total", AttributeValue::Number("12.5").value()},
            {"tags", AttributeValue::List({AttributeValue::String("a")})},
            {"addr", AttributeValue::Map({{"zip", AttributeValue::NumberSet({"2"}).value()}})},
            {"ok", AttributeValue::Bool(true)},
            {"none", AttributeValue::Null()}};
  EXPECT_EQ(*e->new_image, want);
  EXPECT_FALSE(e->old_image.has_value());
  EXPECT_EQ(e->sequence_number, "42");
  EXPECT_EQ(e->creation_time_ms, 1740787200123);
}

TEST(ProtobufEventTest, RemoveNeedsOnlyKeys) {
  v1::ChangeEvent m;
  m.set_kind(v1::ChangeEvent::REMOVE);
  (*m.mutable_keys()->mutable_attributes())["PK"] = PN("7");
  (*m.mutable_old_image()->mutable_attributes())["PK"] = PN("7");
  absl::StatusOr<ChangeEvent> e = DecodeProtobufEvent(m.SerializeAsString());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->kind, ChangeEvent::Kind::kRemove);
  EXPECT_EQ(e->keys, (Item{{"PK", AttributeValue::Number("7").value()}}));
  EXPECT_FALSE(e->new_image.has_value());
  EXPECT_EQ(*e->old_image, (Item{{"PK", AttributeValue::Number("7").value()}}));
}

TEST(ProtobufEventTest, ErrorsNameTheField) {
  v1::ChangeEvent m = Insert();
  m.set_kind(v1::ChangeEvent::KIND_UNSPECIFIED);
  EXPECT_EQ(ErrorOf(m), "kind: expected INSERT, MODIFY or REMOVE, got KIND_UNSPECIFIED");
  m = Insert();
  m.set_kind(static_cast<v1::ChangeEvent::Kind>(9));
  EXPECT_EQ(ErrorOf(m), "kind: expected INSERT, MODIFY or REMOVE, got 9");
  m = Insert();
  m.clear_keys();
  EXPECT_EQ(ErrorOf(m), "keys: is required");
  m = Insert();
  (*m.mutable_keys()->mutable_attributes())["PK"].set_bool_(true);
  EXPECT_EQ(ErrorOf(m), "keys.PK: key attributes must be S, N or B, got BOOL");
  m = Insert();
  (*m.mutable_keys()->mutable_attributes())["PK"].Clear();
  EXPECT_EQ(ErrorOf(m), "keys.PK: no value set (set one of s, n, b, bool, null, m, l, ss, ns, bs)");
  m = Insert();
  m.clear_new_image();
  EXPECT_EQ(ErrorOf(m), "new_image: is required for INSERT");
  m = Insert();
  m.set_kind(v1::ChangeEvent::REMOVE);
  EXPECT_EQ(ErrorOf(m), "new_image: must be absent for REMOVE");
  m = Insert();
  (*m.mutable_new_image()->mutable_attributes())["total"] = PN("abc");
  EXPECT_EQ(ErrorOf(m).rfind("new_image.total: ", 0), 0u);
  m = Insert();
  (*m.mutable_new_image()->mutable_attributes())["addr"].mutable_l()->add_values()->set_n("1x");
  EXPECT_EQ(ErrorOf(m).rfind("new_image.addr[0]: ", 0), 0u);
  m = Insert();
  m.set_sequence_number("12a");
  EXPECT_EQ(ErrorOf(m), "sequence_number: expected decimal digits, got \"12a\"");
  m = Insert();
  m.set_sequence_number(std::string(1000, '9'));
  EXPECT_EQ(ErrorOf(m), "sequence_number: expected at most 40 decimal digits, got 1000");
  m = Insert();
  m.set_sequence_number(std::string(40, '0') + "1");
  EXPECT_EQ(ErrorOf(m), "sequence_number: expected at most 40 decimal digits, got 41");
  m = Insert();
  m.set_sequence_number(std::string(40, '9'));
  ASSERT_TRUE(DecodeProtobufEvent(m.SerializeAsString()).ok());
  m = Insert();
  m.set_creation_time_ms(-5);
  EXPECT_EQ(ErrorOf(m), "creation_time_ms: must not be negative, got -5");
}

TEST(ProtobufEventTest, GarbageIsMalformed) {
  absl::StatusOr<ChangeEvent> e = DecodeProtobufEvent("{\"eventName\":\"INS");
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(IsMalformedProtobuf(e.status()));
  EXPECT_EQ(e.status().message(), "malformed protobuf: 17 bytes are not a cdcview.v1.ChangeEvent");
  // An empty message parses (every field at its default) and is then rejected for its kind.
  absl::StatusOr<ChangeEvent> empty = DecodeProtobufEvent("");
  EXPECT_EQ(empty.status().message(), "kind: expected INSERT, MODIFY or REMOVE, got KIND_UNSPECIFIED");
}

}  // namespace
}  // namespace cdcview
