// The Debezium JSON decoder (daemon/decode/debezium_json.h) on an arbitrary Kafka message:
// the input is the message key, a NUL byte, then the value (no NUL: an empty key). Both ways
// of finding the table key are tried (from the message key; from key_attributes PK and SK in
// the images). The result is no event (a tombstone), an event, or INVALID_ARGUMENT, never an
// abort. An event has keys, all S or N, and every item it carries survives DynamoDB JSON both
// ways (numbers canonical, strings whole), as the applier and the read port need.
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/decode/debezium_json.h"
#include "daemon/decode/dynamodb_json.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

void RoundTrip(const cdcview::Item& item) {
  using namespace cdcview;
  static auto* json_decoder = new DynamoDbJsonDecoder();
  const std::string json = EncodeDynamoDbJson(item);
  absl::StatusOr<Item> again = json_decoder->DecodeItem(json);
  fuzz::Require(again.ok() && *again == item, "DecodeItem(EncodeDynamoDbJson(item)) == item");
}

void Check(cdcview::DebeziumJsonDecoder& decoder, std::string_view key, std::string_view value) {
  using namespace cdcview;
  absl::StatusOr<std::optional<ChangeEvent>> event = decoder.Decode(key, value);
  if (!event.ok()) {
    fuzz::RequireRejectedAs(event.status(), absl::StatusCode::kInvalidArgument,
                            "a bad message is INVALID_ARGUMENT");
    return;
  }
  if (!event->has_value()) return;  // a tombstone
  const ChangeEvent& e = **event;
  fuzz::Require(!e.keys.empty(), "a decoded event has keys");
  for (const auto& [name, v] : e.keys) {
    fuzz::Require(v.type() == AttrType::kS || v.type() == AttrType::kN, "keys are S or N");
  }
  RoundTrip(e.keys);
  if (e.new_image) RoundTrip(*e.new_image);
  if (e.old_image) RoundTrip(*e.old_image);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cdcview;
  static auto* from_key = new DebeziumJsonDecoder();
  static auto* from_images = new DebeziumJsonDecoder({"PK", "SK"});
  const std::string_view input = fuzz::Bytes(data, size);
  const size_t nul = input.find('\0');
  const std::string_view key = nul == std::string_view::npos ? "" : input.substr(0, nul);
  const std::string_view value = nul == std::string_view::npos ? input : input.substr(nul + 1);
  Check(*from_key, key, value);
  Check(*from_images, key, value);
  return 0;
}
