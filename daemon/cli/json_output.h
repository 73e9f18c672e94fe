// JSON renderings of cdcview.v1 items for the CLI: plain JSON (S -> string, N -> number with its
// exact digits, B -> base64 string, sets -> arrays) or DynamoDB JSON ({"S": "..."}).
// Plain JSON prints a number a double cannot hold exactly (more than 15 significant digits,
// or a decimal exponent outside -307..307) as a string of its exact digits, since jq and
// JavaScript read every JSON number into a double; DynamoDB JSON has every N as a string.
// Pure functions; thread-safe.
#pragma once

#include <string>

#include "cdcview/v1/attribute_value.pb.h"

namespace cdcview {

std::string ItemToJson(const v1::Item& item, bool dynamodb_json);
std::string ValueToJson(const v1::AttributeValue& value, bool dynamodb_json);
std::string JsonString(const std::string& s);
std::string Base64(const std::string& bytes);

}  // namespace cdcview
