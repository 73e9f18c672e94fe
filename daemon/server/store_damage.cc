#include "daemon/server/store_damage.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/server/error_text.h"
#include "daemon/store/lmdb_status.h"
#include "index_builders/key_codec.h"

namespace cdcview {

std::string KeyText(std::string_view encoded) {
  std::string text;
  std::string_view rest = encoded;
  while (!rest.empty()) {
    std::string_view before = rest;
    auto value = DecodeKeyComponent(&rest);
    if (!value.ok()) {
      rest = before;
      break;
    }
    if (!text.empty()) text.append(" · ");
    switch (value->type()) {
      case AttrType::kS: text.append(QuoteBounded(value->scalar())); break;
      case AttrType::kN: text.append(value->scalar()); break;
      default: text.append("0x").append(absl::BytesToHexString(value->scalar().substr(0, kQuotedValueBytes)));
    }
  }
  if (!rest.empty()) {
    if (!text.empty()) text.append(" · ");
    text.append("0x").append(absl::BytesToHexString(
        absl::string_view(rest.data(), std::min(rest.size(), kQuotedValueBytes))));
    if (rest.size() > kQuotedValueBytes) absl::StrAppend(&text, "... (", rest.size(), " bytes)");
  }
  return text;
}

absl::Status StoreDamageError(const absl::Status& error, std::string_view what,
                              std::string_view lower, std::string_view upper) {
  if (!IsStoreError(error)) return error;
  std::string where;
  if (!lower.empty() && lower == upper) {
    where = absl::StrCat("at key ", KeyText(lower));
  } else {
    where = absl::StrCat("between keys ", lower.empty() ? "(first)" : KeyText(lower), " and ",
                         upper.empty() ? "(last)" : KeyText(upper));
  }
  return absl::DataLossError(absl::StrCat(
      absl::string_view(what.data(), what.size()), ": the store is damaged ", where, " (",
      error.message(), "); stop cdcviewd and run cdcviewd --verify-store"));
}

}  // namespace cdcview
