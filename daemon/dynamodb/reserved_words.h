// DynamoDB's reserved words (Developer Guide, "Reserved words in DynamoDB"): an unquoted
// attribute name in an expression that is one of them is a ValidationException. Pure; thread-safe.
#pragma once

#include <string_view>

namespace cdcview::dynamodb {

// True if `word` is a reserved word, compared case-insensitively ("Status", "STATUS").
bool IsReservedWord(std::string_view word);

}  // namespace cdcview::dynamodb
