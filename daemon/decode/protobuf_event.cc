#include "daemon/decode/protobuf_event.h"

#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/decode/attribute_value_proto.h"
#include "daemon/decode/decode_errors.h"
#include "cdcview/v1/change_event.pb.h"

namespace cdcview {
namespace {

using decode_internal::PathError;
using decode_internal::ToAbsl;

constexpr char kMalformedPrefix[] = "malformed protobuf: ";

absl::StatusOr<ChangeEvent::Kind> KindOf(const v1::ChangeEvent& event) {
  switch (event.kind()) {
    case v1::ChangeEvent::INSERT: return ChangeEvent::Kind::kInsert;
    case v1::ChangeEvent::MODIFY: return ChangeEvent::Kind::kModify;
    case v1::ChangeEvent::REMOVE: return ChangeEvent::Kind::kRemove;
    default: break;
  }
  std::string got = v1::ChangeEvent::Kind_IsValid(event.kind())
                        ? v1::ChangeEvent::Kind_Name(event.kind())
                        : absl::StrCat(static_cast<int>(event.kind()));
  return PathError("kind", absl::StrCat("expected INSERT, MODIFY or REMOVE, got ", got));
}

absl::StatusOr<Item> KeysOf(const v1::ChangeEvent& event) {
  if (!event.has_keys() || event.keys().attributes().empty()) {
    return PathError("keys", "is required");
  }
  absl::StatusOr<Item> keys = FromProto(event.keys(), "keys");
  if (!keys.ok()) return keys.status();
  for (const auto& [name, value] : *keys) {
    AttrType type = value.type();
    if (type != AttrType::kS && type != AttrType::kN && type != AttrType::kB) {
      return PathError(absl::StrCat("keys.", name),
                       absl::StrCat("key attributes must be S, N or B, got ",
                                    ToAbsl(AttrTypeName(type))));
    }
  }
  return keys;
}

absl::Status CheckSequenceNumber(const std::string& text) {
  for (char c : text) {
    if (c < '0' || c > '9') {
      return PathError("sequence_number",
                       absl::StrCat("expected decimal digits, got \"", absl::CHexEscape(text), "\""));
    }
  }
  if (text.size() > kMaxSequenceNumberDigits) {
    return PathError("sequence_number", absl::StrCat("expected at most ", kMaxSequenceNumberDigits,
                                                     " decimal digits, got ", text.size()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ChangeEvent> DecodeProtobufEvent(std::string_view bytes) {
  v1::ChangeEvent message;
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(kMalformedPrefix, bytes.size(),
                                                   " bytes are not a cdcview.v1.ChangeEvent"));
  }
  ChangeEvent event;
  absl::StatusOr<ChangeEvent::Kind> kind = KindOf(message);
  if (!kind.ok()) return kind.status();
  event.kind = *kind;
  absl::StatusOr<Item> keys = KeysOf(message);
  if (!keys.ok()) return keys.status();
  event.keys = *std::move(keys);
  const std::string kind_name(ChangeKindName(event.kind));
  if (event.kind != ChangeEvent::Kind::kRemove) {
    if (!message.has_new_image()) {
      return PathError("new_image", absl::StrCat("is required for ", kind_name));
    }
    absl::StatusOr<Item> image = FromProto(message.new_image(), "new_image");
    if (!image.ok()) return image.status();
    event.new_image = *std::move(image);
  } else if (message.has_new_image()) {
    return PathError("new_image", "must be absent for REMOVE");
  }
  if (message.has_old_image()) {
    absl::StatusOr<Item> image = FromProto(message.old_image(), "old_image");
    if (!image.ok()) return image.status();
    event.old_image = *std::move(image);
  }
  if (absl::Status s = CheckSequenceNumber(message.sequence_number()); !s.ok()) return s;
  event.sequence_number = message.sequence_number();
  if (message.creation_time_ms() < 0) {
    return PathError("creation_time_ms", absl::StrCat("must not be negative, got ",
                                                      message.creation_time_ms()));
  }
  event.creation_time_ms = message.creation_time_ms();
  return event;
}

bool IsMalformedProtobuf(const absl::Status& status) {
  return absl::IsInvalidArgument(status) && absl::StartsWith(status.message(), kMalformedPrefix);
}

}  // namespace cdcview
