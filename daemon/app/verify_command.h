// VerifyStoreCommand: `cdcviewd --verify-store`, the offline check of a store's pages
// (daemon/store/store_verifier.h) for an operator: takes the store's lock (so no cdcviewd
// writes it meanwhile), walks every database, prints the verdict and each problem on `out`
// and its progress on `progress` (once a second at most: a large store takes a while).
//
// Exit status: 0 clean; 1 damaged; 2 not verified (no store at the path, the store in use by
// a running cdcviewd, an unreadable file).
//
// Thread-safety: one call at a time per store. Ownership: writes to the caller's streams.
#pragma once

#include <ostream>

#include "daemon/config/config.h"

namespace cdcview {

int VerifyStoreCommand(const Config& config, std::ostream& out, std::ostream& progress);

}  // namespace cdcview
