// DynamoDB Streams JSON: decoding one `Records[]` element of GetRecords into a ChangeEvent,
// and encoding items back into DynamoDB JSON ({"PK": {"S": "USER#1"}, "total": {"N": "9.5"}}).
//
// DynamoDbJsonDecoder owns a simdjson on-demand parser and its buffers, which it reuses
// from record to record. It is NOT thread-safe: use one decoder per thread (each source
// reader thread owns its own). Decoded events own their data; nothing points into the
// decoder or the input after Decode returns.
//
// Errors are INVALID_ARGUMENT with "<JSON path>: <problem>", for example
//   malformed JSON: <simdjson's error text>
//   eventName: expected INSERT, MODIFY or REMOVE, got "UPSERT"
//   dynamodb.Keys: is required
//   dynamodb.NewImage.total: N value must be a string, got number
//   dynamodb.NewImage.total: number "abc" is not a valid number
//   dynamodb.NewImage.x: attribute value must have exactly one type key, got 2
//   dynamodb.NewImage.x: unknown attribute type "Q"
//   dynamodb.Keys.PK: invalid base64
//   dynamodb.SequenceNumber: expected decimal digits, got "12a"
//   dynamodb.SequenceNumber: expected at most 40 decimal digits (DynamoDB's have 21 to 40), got 1000
// Fields the decoder does not use (eventVersion, tableName, ...) are ignored, so newer
// stream formats keep working.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "index_builders/attribute_value.h"
#include "index_builders/change_event.h"

namespace cdcview {

class DynamoDbJsonDecoder {
 public:
  DynamoDbJsonDecoder();
  ~DynamoDbJsonDecoder();
  DynamoDbJsonDecoder(const DynamoDbJsonDecoder&) = delete;
  DynamoDbJsonDecoder& operator=(const DynamoDbJsonDecoder&) = delete;

  // Decodes one stream record:
  //   {"eventID": ..., "eventName": "INSERT"|"MODIFY"|"REMOVE", "eventSource": ...,
  //    "awsRegion": ..., "userIdentity": {"type": ..., "principalId": ...},
  //    "dynamodb": {"Keys": {...}, "NewImage": {...}, "OldImage": {...},
  //                 "SequenceNumber": "<digits>", "SizeBytes": n, "StreamViewType": ...,
  //                 "ApproximateCreationDateTime": <seconds since the epoch> | "<ISO-8601>"}}
  // eventName and dynamodb.Keys are required; INSERT and MODIFY need dynamodb.NewImage
  // (the applier cannot apply a change it cannot see). A REMOVE by the principal
  // "dynamodb.amazonaws.com" is a TTL deletion (ttl_delete). Creation time is rounded to
  // whole milliseconds.
  absl::StatusOr<ChangeEvent> Decode(std::string_view record_json);

  // Decodes a bare attribute map in DynamoDB JSON ({"PK": {"S": "x"}}), e.g. a key typed
  // on the command line. Error paths start at the attribute name ("PK: invalid base64").
  absl::StatusOr<Item> DecodeItem(std::string_view item_json);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True if `status` came from Decode/DecodeItem because the input is not JSON at all
// (as opposed to JSON that is not a valid record): the "malformed_json" rejection reason.
bool IsMalformedJson(const absl::Status& status);

// An item as DynamoDB JSON, attributes in name order, no whitespace:
// {"PK":{"S":"USER#1"},"tags":{"SS":["a","b"]},"total":{"N":"9.5"}}.
// B and BS values are base64. Decoding the result gives back an equal item.
std::string EncodeDynamoDbJson(const Item& item);
// One attribute value as DynamoDB JSON: {"S":"x"}, {"N":"1.5"}, {"NULL":true}, ...
std::string EncodeDynamoDbJson(const AttributeValue& value);

}  // namespace cdcview
