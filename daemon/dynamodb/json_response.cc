#include "daemon/dynamodb/json_response.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/decode/dynamodb_json.h"
#include "daemon/decode/json_escape.h"

namespace cdcview::dynamodb {

void JsonWriter::Separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_.push_back(',');
    first_.back() = false;
  }
}

void JsonWriter::BeginObject() {
  Separate();
  out_.push_back('{');
  first_.push_back(true);
}

void JsonWriter::EndObject() {
  out_.push_back('}');
  first_.pop_back();
}

void JsonWriter::BeginArray() {
  Separate();
  out_.push_back('[');
  first_.push_back(true);
}

void JsonWriter::EndArray() {
  out_.push_back(']');
  first_.pop_back();
}

void JsonWriter::Key(std::string_view name) {
  Separate();
  AppendJsonString(name, &out_);
  out_.push_back(':');
  after_key_ = true;
}

void JsonWriter::String(std::string_view text) {
  Separate();
  AppendJsonString(text, &out_);
}

void JsonWriter::Int(uint64_t value) {
  Separate();
  absl::StrAppend(&out_, value);
}

void JsonWriter::Double(double value) {
  Separate();
  absl::StrAppend(&out_, absl::StrFormat("%.3f", value));
}

void JsonWriter::Bool(bool value) {
  Separate();
  out_.append(value ? "true" : "false");
}

void JsonWriter::ItemValue(const Item& item) {
  Separate();
  out_.append(EncodeDynamoDbJson(item));
}

void JsonWriter::RawArray(std::string_view elements) {
  Separate();
  out_.push_back('[');
  out_.append(elements);
  out_.push_back(']');
}

void JsonWriter::RawValue(std::string_view json) {
  Separate();
  out_.append(json);
}

}  // namespace cdcview::dynamodb
