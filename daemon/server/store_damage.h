// StoreDamageError: what a read answers when the store fails under it (a damaged page, see
// daemon/store/lmdb_status.h): DATA_LOSS naming what was read (a view, a table, an aggregate)
// and the key range the read covered, so an operator knows which part of the store to suspect,
// and what to do. Both ports send it as it is.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace cdcview {

// `error` unchanged unless it is a store error (IsStoreError); then DATA_LOSS:
//   view V: the store is damaged between keys K1 and K2 (<LMDB's message>); stop cdcviewd and
//   run cdcviewd --verify-store
// `lower` and `upper` are encoded keys ("" lower: the first key; "" upper: past the last);
// equal ones name one key.
absl::Status StoreDamageError(const absl::Status& error, std::string_view what,
                              std::string_view lower, std::string_view upper);

// An encoded key as text: its components decoded while they decode (S quoted, N as the
// number, B in hex), then any rest in hex; bounded in length.
std::string KeyText(std::string_view encoded);

}  // namespace cdcview
