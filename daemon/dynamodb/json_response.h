// JsonWriter: compact JSON text for the DynamoDB endpoint's answers, written in one pass into a
// string (no DOM). Items are appended as DynamoDB JSON (dynamodb_json.h's encoder).
//
// The writer tracks only whether a comma is due; callers nest Begin/End calls correctly (a
// mismatch is a programming error, not checked). Not thread-safe; one per answer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "index_builders/attribute_value.h"

namespace cdcview::dynamodb {

class JsonWriter {
 public:
  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  // The name of the next object member.
  void Key(std::string_view name);
  void String(std::string_view text);
  void Int(uint64_t value);
  void Double(double value);
  void Bool(bool value);
  // An item as DynamoDB JSON: {"PK":{"S":"x"},...}.
  void ItemValue(const Item& item);
  // An array whose elements are already JSON text joined by ",".
  void RawArray(std::string_view elements);
  // A value that is already JSON text.
  void RawValue(std::string_view json);

  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void Separate();

  std::string out_;
  std::vector<bool> first_;  // per open object or array: no member written yet
  bool after_key_ = false;
};

}  // namespace cdcview::dynamodb
