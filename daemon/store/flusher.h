// Flusher: the write-back layers a Store has published and not committed to LMDB yet, and the
// thread that commits them (storage.flush_interval_ms > 0; see "Write-back" in store.h).
//
// A buffered WriteTxn publishes its layer here (Publish); every transaction begun later reads
// the published layers over its LMDB snapshot (Published). The flush thread commits them all
// to LMDB in one transaction, with meta/flushed_layer, once the oldest is flush_interval_ms
// old, or earlier once they hold Store::kFlushBytes or number Store::kFlushLayers; then drops
// them. A direct write (BeginWrite) begins with the layers written into it and drops them when
// it commits. A flush that fails keeps the layers and its error, and the thread retries with
// back-off; BeginBuffered waits (WaitForRoom) while the layers hold more than
// Store::kMaxPendingBytes.
//
// Thread-safety: every method may be called from any thread. The flush lock (flush_mu_)
// admits one flush or direct write at a time, so layers leave in the order they came; it is
// taken before pending_mu_, which guards the published layers and the flush's outcome.
// Ownership: the Store owns its flusher (only with write-back on) and outlives it; the
// destructor flushes what is pending, then joins the thread. Published layers are shared:
// a transaction keeps alive the ones it reads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/store/pending_layer.h"

namespace cdcview {

class Store;
class WriteTxn;

class Flusher {
 public:
  // Layers published after `interval` are flushed; nothing runs until Start.
  Flusher(Store* store, std::chrono::milliseconds interval);
  ~Flusher();
  Flusher(const Flusher&) = delete;
  Flusher& operator=(const Flusher&) = delete;

  // Starts the flush thread; published layers are numbered from `next_sequence` on (past the
  // last one LMDB holds, so a snapshot's stored sequence never hides a layer of this run).
  void Start(uint64_t next_sequence);

  // Numbers `layer`, builds its Bloom filters and appends it to the published layers.
  void Publish(std::unique_ptr<PendingLayer> layer);
  // The published layers, oldest first (immutable: a later publication or flush makes a new
  // list).
  std::shared_ptr<const PendingLayers> Published() const;
  // Waits while the published layers hold more than Store::kMaxPendingBytes: UNAVAILABLE
  // (saying why) if flushing them fails meanwhile, CANCELLED when the flusher stops.
  absl::Status WaitForRoom();
  // Store::BeginWrite with write-back on: a write transaction on LMDB with the published
  // layers written into it, holding the flush lock until it ends; its commit drops them.
  absl::StatusOr<std::unique_ptr<WriteTxn>> BeginWrite() ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Commits every published layer to LMDB in one transaction, growing the map as needed.
  absl::Status FlushNow() ABSL_LOCKS_EXCLUDED(flush_mu_);
  // After a flush of `layers` (the front of the published ones), by a flush or by the direct
  // WriteTxn that absorbed them, either of which holds the flush lock: drops them, or keeps
  // the error for flush_error().
  void Flushed(const PendingLayers& layers, const absl::Status& s) ABSL_LOCKS_EXCLUDED(pending_mu_);
  // Store::GrowMap with no flush running (a flush may have a write transaction open).
  absl::Status GrowMap() ABSL_LOCKS_EXCLUDED(flush_mu_);

  std::string flush_error() const;
  size_t pending_layers() const;
  size_t pending_bytes() const;
  std::chrono::microseconds last_flush() const {
    return std::chrono::microseconds(last_flush_us_.load());
  }

 private:
  void FlushLoop();
  // BeginWrite's transaction: LMDB's, with the published layers written into it.
  absl::StatusOr<std::unique_ptr<WriteTxn>> BeginAbsorbing() ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_);
  // Writes `layers` (oldest first) into `txn`: per database the last write of each key, in
  // key order, and the last layer's sequence under meta/flushed_layer.
  absl::Status WriteLayers(const PendingLayers& layers, WriteTxn* txn)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_);

  Store* const store_;
  const std::chrono::milliseconds interval_;
  // Held by a flush, and by a direct WriteTxn from BeginWrite to its end.
  absl::Mutex flush_mu_ ABSL_ACQUIRED_BEFORE(pending_mu_);
  mutable absl::Mutex pending_mu_;
  absl::CondVar pending_changed_;  // a layer published or flushed, a flush failed, stopping
  std::shared_ptr<const PendingLayers> pending_ ABSL_GUARDED_BY(pending_mu_) =
      std::make_shared<PendingLayers>();
  size_t pending_bytes_ ABSL_GUARDED_BY(pending_mu_) = 0;
  uint64_t next_sequence_ ABSL_GUARDED_BY(pending_mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(pending_mu_) = false;
  uint64_t flushes_ ABSL_GUARDED_BY(pending_mu_) = 0;  // flushes that ended (well or not)
  std::string flush_error_ ABSL_GUARDED_BY(pending_mu_);
  std::atomic<int64_t> last_flush_us_{0};
  std::thread thread_;
};

}  // namespace cdcview
