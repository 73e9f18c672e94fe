#include "daemon/server/proto_convert.h"

#include "daemon/decode/attribute_value_proto.h"
#include "index_builders/item_codec.h"
#include "index_builders/key_codec.h"

namespace cdcview {

absl::Status EntryToProto(const ViewSpec& view, std::string_view key, std::string_view value,
                          v1::ViewEntry* out) {
  auto pk = DecodeKeyComponent(&key);
  if (!pk.ok()) return pk.status();
  ToProto(*pk, out->mutable_partition_key());
  if (view.has_sort_key()) {
    auto sk = DecodeKeyComponent(&key);
    if (!sk.ok()) return sk.status();
    ToProto(*sk, out->mutable_sort_key());
  }
  auto item = DecodeItem(value);
  if (!item.ok()) return item.status();
  ToProto(*item, out->mutable_item());
  return absl::OkStatus();
}

}  // namespace cdcview
