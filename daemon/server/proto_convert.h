// Stored view entries as the cdcview.v1 messages Query, Scan and Watch answer with. Values
// and items convert in daemon/decode/attribute_value_proto.h.
// Pure functions; thread-safe.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "cdcview/v1/view_service.pb.h"
#include "index_builders/view_spec.h"

namespace cdcview {

// A stored view entry (key = enc(pk) · enc(sk)? · table key, value = EncodeItem of the projected
// item) as Query, Scan and Watch return it: the item and the view keys it sits under.
absl::Status EntryToProto(const ViewSpec& view, std::string_view key, std::string_view value,
                          v1::ViewEntry* out);

}  // namespace cdcview
