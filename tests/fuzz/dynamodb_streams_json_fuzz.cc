// The DynamoDB Streams JSON decoder (daemon/decode/dynamodb_json.h) on arbitrary bytes, as a
// stream record (Decode) and as a bare item (DecodeItem): a change event or INVALID_ARGUMENT,
// never an abort or a read past the input. Every item it decoded (keys and images) survives
// DynamoDB JSON both ways: EncodeDynamoDbJson then DecodeItem gives the same item, and the
// encoding is a fixed point from there.
#include <cstdint>
#include <string>

#include "daemon/decode/dynamodb_json.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

void RoundTrip(cdcview::DynamoDbJsonDecoder& decoder, const cdcview::Item& item) {
  using namespace cdcview;
  const std::string json = EncodeDynamoDbJson(item);
  absl::StatusOr<Item> again = decoder.DecodeItem(json);
  fuzz::Require(again.ok() && *again == item, "DecodeItem(EncodeDynamoDbJson(item)) == item");
  fuzz::Require(EncodeDynamoDbJson(*again) == json, "the encoding is a fixed point");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cdcview;
  static auto* decoder = new DynamoDbJsonDecoder();  // reused, as a source thread reuses its own
  const std::string_view input = fuzz::Bytes(data, size);
  absl::StatusOr<ChangeEvent> event = decoder->Decode(input);
  if (event.ok()) {
    fuzz::Require(!event->keys.empty(), "a decoded event has keys");
    RoundTrip(*decoder, event->keys);
    if (event->new_image) RoundTrip(*decoder, *event->new_image);
    if (event->old_image) RoundTrip(*decoder, *event->old_image);
  } else {
    fuzz::RequireRejectedAs(event.status(), absl::StatusCode::kInvalidArgument,
                            "a bad record is INVALID_ARGUMENT");
  }
  absl::StatusOr<Item> item = decoder->DecodeItem(input);
  if (item.ok()) {
    RoundTrip(*decoder, *item);
  } else {
    fuzz::RequireRejectedAs(item.status(), absl::StatusCode::kInvalidArgument,
                            "a bad item is INVALID_ARGUMENT");
  }
  return 0;
}
