// The protobuf change-event decoder (daemon/decode/protobuf_event.h) on arbitrary bytes: an
// event or INVALID_ARGUMENT, never an abort. An event it decoded, written back as a
// cdcview.v1.ChangeEvent (the attribute conversions of attribute_value_proto.h) and decoded
// again, is the same event.
#include <cstdint>
#include <string>

#include "cdcview/v1/change_event.pb.h"
#include "daemon/decode/attribute_value_proto.h"
#include "daemon/decode/protobuf_event.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

cdcview::v1::ChangeEvent::Kind ToProtoKind(cdcview::ChangeEvent::Kind kind) {
  switch (kind) {
    case cdcview::ChangeEvent::Kind::kInsert: return cdcview::v1::ChangeEvent::INSERT;
    case cdcview::ChangeEvent::Kind::kModify: return cdcview::v1::ChangeEvent::MODIFY;
    case cdcview::ChangeEvent::Kind::kRemove: return cdcview::v1::ChangeEvent::REMOVE;
  }
  return cdcview::v1::ChangeEvent::KIND_UNSPECIFIED;
}

// Seeds: cdcview.v1.ChangeEvent messages as a producer serializes them.
void WriteSeeds(const std::string& dir) {
  using namespace cdcview;
  Item keys = {{"PK", AttributeValue::String("USER#1")}, {"SK", *AttributeValue::Number("2")}};
  Item image = keys;
  image["m"] = AttributeValue::Map({{"a", AttributeValue::List({AttributeValue::Bool(true)})}});
  image["ss"] = AttributeValue::StringSet({"a", "b"});
  image["b"] = AttributeValue::Binary("\x01\x02");
  image["z"] = AttributeValue::Null();
  int i = 0;
  for (auto kind : {v1::ChangeEvent::INSERT, v1::ChangeEvent::MODIFY, v1::ChangeEvent::REMOVE}) {
    v1::ChangeEvent e;
    e.set_kind(kind);
    ToProto(keys, e.mutable_keys());
    if (kind != v1::ChangeEvent::REMOVE) ToProto(image, e.mutable_new_image());
    if (kind != v1::ChangeEvent::INSERT) ToProto(keys, e.mutable_old_image());
    e.set_sequence_number("100000000000000000015");
    e.set_creation_time_ms(1740787200123);
    cdcview::fuzz::WriteSeed(dir, "event_" + std::to_string(i++), e.SerializeAsString());
  }
}

}  // namespace

CDCVIEW_FUZZ_SEED_MODE(WriteSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cdcview;
  absl::StatusOr<ChangeEvent> event = DecodeProtobufEvent(fuzz::Bytes(data, size));
  if (!event.ok()) {
    fuzz::RequireRejectedAs(event.status(), absl::StatusCode::kInvalidArgument,
                            "a bad message is INVALID_ARGUMENT");
    return 0;
  }
  fuzz::Require(!event->keys.empty(), "a decoded event has keys");
  v1::ChangeEvent proto;
  proto.set_kind(ToProtoKind(event->kind));
  ToProto(event->keys, proto.mutable_keys());
  if (event->new_image) ToProto(*event->new_image, proto.mutable_new_image());
  if (event->old_image) ToProto(*event->old_image, proto.mutable_old_image());
  proto.set_sequence_number(event->sequence_number);
  proto.set_creation_time_ms(event->creation_time_ms);
  absl::StatusOr<ChangeEvent> again = DecodeProtobufEvent(proto.SerializeAsString());
  fuzz::Require(again.ok() && fuzz::SameEvent(*again, *event),
                "decode(encode(decode(bytes))) == decode(bytes)");
  return 0;
}
