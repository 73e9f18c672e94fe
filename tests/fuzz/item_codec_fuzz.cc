// The item codec (index_builders/item_codec.h), which reads every stored item back, on
// arbitrary bytes: DecodeItem returns an item or DATA_LOSS, never aborts or recurses without
// bound; an item it decoded encodes to bytes that decode to the same item, and encoding is a
// fixed point from there (varints may be overlong in the input, so the input itself need not
// come back). EncodeItemSubset of some of its names (with a duplicate and an absent one)
// equals EncodeItem of that subset.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "index_builders/item_codec.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

// Seeds: items of every attribute type, as the writer stores them.
void WriteSeeds(const std::string& dir) {
  using namespace cdcview;
  Item inner = {{"k", *AttributeValue::Number("-1e2")}, {"s", AttributeValue::String("x")}};
  const std::vector<Item> items = {
      {},
      {{"PK", AttributeValue::String("USER#1")}, {"n", *AttributeValue::Number("7")}},
      {{"b", AttributeValue::Binary(std::string("\0\x01\xff", 3))},
       {"t", AttributeValue::Bool(true)},
       {"z", AttributeValue::Null()},
       {"m", AttributeValue::Map(inner)},
       {"l", AttributeValue::List({AttributeValue::String("a"), AttributeValue::Map(inner)})},
       {"ss", AttributeValue::StringSet({"a", "b"})},
       {"ns", *AttributeValue::NumberSet({"10", "2.5"})},
       {"bs", AttributeValue::BinarySet({"a", "b"})}},
  };
  for (size_t i = 0; i < items.size(); ++i) {
    fuzz::WriteSeed(dir, "item_" + std::to_string(i), EncodeItem(items[i]));
  }
}

}  // namespace

CDCVIEW_FUZZ_SEED_MODE(WriteSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cdcview;
  absl::StatusOr<Item> item = DecodeItem(fuzz::Bytes(data, size));
  if (!item.ok()) {
    fuzz::RequireRejectedAs(item.status(), absl::StatusCode::kDataLoss,
                            "bytes that are no item are DATA_LOSS");
    return 0;
  }
  const std::string encoded = EncodeItem(*item);
  absl::StatusOr<Item> again = DecodeItem(encoded);
  fuzz::Require(again.ok() && *again == *item, "decode(encode(item)) == item");
  fuzz::Require(EncodeItem(*again) == encoded, "encode(decode(encode(item))) == encode(item)");

  std::vector<std::string_view> names;
  Item subset;
  bool take = true;
  for (const auto& [name, value] : *item) {
    if (take) {
      names.push_back(name);
      subset.emplace(name, value);
    }
    take = !take;
  }
  if (!names.empty()) names.push_back(names.front());
  // A name the item does not hold: the input may hold any name, this one included.
  std::string absent = "\x01no such attribute";
  while (item->contains(absent)) absent.push_back('\x01');
  names.push_back(absent);
  std::string partial;
  EncodeItemSubset(*item, names, &partial);
  fuzz::Require(partial == EncodeItem(subset), "EncodeItemSubset == EncodeItem(subset)");
  return 0;
}
