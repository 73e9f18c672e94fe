#include "daemon/store/flusher.h"

#include <pthread.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/log/log.h"
#include "daemon/store/store.h"
#include "daemon/store/store_internal.h"
#include "daemon/store/txn.h"

namespace cdcview {

using store_internal::kFlushedKey;

Flusher::Flusher(Store* store, std::chrono::milliseconds interval)
    : store_(store), interval_(interval) {}

Flusher::~Flusher() {
  if (!thread_.joinable()) return;
  {
    absl::MutexLock lock(&pending_mu_);
    stopping_ = true;
  }
  pending_changed_.SignalAll();
  thread_.join();  // flushes what is pending first
}

void Flusher::Start(uint64_t next_sequence) {
  {
    absl::MutexLock lock(&pending_mu_);
    next_sequence_ = next_sequence;
  }
  thread_ = std::thread([this] { FlushLoop(); });
}

void Flusher::Publish(std::unique_ptr<PendingLayer> layer) {
  for (PendingLayer::Db& db : layer->dbs) {
    if (!db.entries.empty()) db.BuildBloom();
  }
  {
    absl::MutexLock lock(&pending_mu_);
    layer->sequence = next_sequence_++;
    layer->published = std::chrono::steady_clock::now();
    pending_bytes_ += layer->bytes;
    auto next = std::make_shared<PendingLayers>(*pending_);
    next->push_back(std::move(layer));
    pending_ = std::move(next);
  }
  pending_changed_.SignalAll();
}

std::shared_ptr<const PendingLayers> Flusher::Published() const {
  absl::MutexLock lock(&pending_mu_);
  return pending_;
}

absl::Status Flusher::WaitForRoom() {
  absl::MutexLock lock(&pending_mu_);
  while (pending_bytes_ > Store::kMaxPendingBytes) {
    if (!flush_error_.empty()) {  // the writer retries with back-off, saying why
      return absl::UnavailableError(absl::StrCat(
          "applied batches cannot be flushed to LMDB (", pending_bytes_,
          " bytes wait in memory): ", flush_error_));
    }
    if (stopping_) return absl::CancelledError("the store is closing");
    const uint64_t flushes = flushes_;
    const absl::Time recheck = absl::Now() + absl::Seconds(1);
    while (flushes_ == flushes && !stopping_ &&
           !pending_changed_.WaitWithDeadline(&pending_mu_, recheck)) {
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WriteTxn>> Flusher::BeginWrite() {
  // Until this transaction ends no flush runs, and it begins with the pending layers. The
  // transaction releases the flush lock when it ends.
  flush_mu_.Lock();
  absl::StatusOr<std::unique_ptr<WriteTxn>> txn = BeginAbsorbing();
  if (!txn.ok()) {
    flush_mu_.Unlock();
    return txn;
  }
  (*txn)->flush_locked_ = &flush_mu_;
  return txn;
}

absl::StatusOr<std::unique_ptr<WriteTxn>> Flusher::BeginAbsorbing() {
  std::shared_ptr<const PendingLayers> layers = Published();
  for (;;) {
    auto txn = store_->BeginLmdbWrite();
    if (!txn.ok() || layers->empty()) return txn;
    absl::Status s = WriteLayers(*layers, txn->get());
    if (s.ok()) {
      (*txn)->absorbed_ = std::move(layers);
      (*txn)->flusher_ = this;
      return txn;
    }
    if (!absl::IsResourceExhausted(s)) return s;
    (*txn)->Abort();
    if (absl::Status grown = store_->GrowMapLocked(); !grown.ok()) return grown;
    LogInfo(absl::StrCat("LMDB map grown to ", store_->map_size(), " bytes"));
  }
}

absl::Status Flusher::FlushNow() {
  absl::MutexLock flushing(&flush_mu_);
  const auto started = std::chrono::steady_clock::now();
  const std::shared_ptr<const PendingLayers> layers = Published();
  if (layers->empty()) return absl::OkStatus();  // a direct write took them
  absl::Status s;
  for (;;) {
    auto txn = store_->BeginLmdbWrite();
    if (!txn.ok()) {
      s = txn.status();
      break;
    }
    s = WriteLayers(*layers, txn->get());
    if (s.ok()) s = (*txn)->Commit();
    if (!absl::IsResourceExhausted(s)) break;
    (*txn)->Abort();
    s = store_->GrowMapLocked();
    if (!s.ok()) break;
    LogInfo(absl::StrCat("LMDB map grown to ", store_->map_size(), " bytes"));
  }
  if (s.ok()) {
    last_flush_us_.store(std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - started)
                             .count());
  }
  Flushed(*layers, s);
  return s;
}

void Flusher::Flushed(const PendingLayers& layers, const absl::Status& s) {
  {
    absl::MutexLock lock(&pending_mu_);
    ++flushes_;
    if (s.ok()) {
      // Layers are only published at the back and only flushed from the front, one flush
      // (or direct write) at a time: `layers` is the front of pending_.
      size_t bytes = 0;
      for (const auto& layer : layers) bytes += layer->bytes;
      pending_bytes_ -= bytes;
      pending_ = std::make_shared<PendingLayers>(pending_->begin() + layers.size(), pending_->end());
      flush_error_.clear();
    } else {
      flush_error_ = std::string(s.message());
    }
  }
  pending_changed_.SignalAll();
}

absl::Status Flusher::GrowMap() {
  absl::MutexLock flushing(&flush_mu_);
  return store_->GrowMapLocked();
}

std::string Flusher::flush_error() const {
  absl::MutexLock lock(&pending_mu_);
  return flush_error_;
}

size_t Flusher::pending_layers() const {
  absl::MutexLock lock(&pending_mu_);
  return pending_->size();
}

size_t Flusher::pending_bytes() const {
  absl::MutexLock lock(&pending_mu_);
  return pending_bytes_;
}

void Flusher::FlushLoop() {
  pthread_setname_np(pthread_self(), "cdcview-flush");  // for top -H, perf and the benches
  auto backoff = std::chrono::milliseconds(250);
  for (;;) {
    size_t layers = 0;
    {
      absl::MutexLock lock(&pending_mu_);
      for (;;) {
        if (pending_->empty()) {
          if (stopping_) return;
          pending_changed_.Wait(&pending_mu_);
          continue;
        }
        if (stopping_ || pending_bytes_ >= Store::kFlushBytes ||
            pending_->size() >= Store::kFlushLayers) {
          break;
        }
        const auto due = pending_->front()->published + interval_;
        const auto now = std::chrono::steady_clock::now();
        if (now >= due) break;
        pending_changed_.WaitWithTimeout(&pending_mu_, absl::FromChrono(due - now));
      }
      layers = pending_->size();
    }
    absl::Status s = FlushNow();
    if (s.ok()) {
      backoff = std::chrono::milliseconds(250);
      continue;
    }
    absl::MutexLock lock(&pending_mu_);
    if (stopping_) {
      LogError(absl::StrCat("cannot flush the last ", layers,
                            " applied batches to LMDB at shutdown: ", s.message(),
                            "; their sources deliver those events again at the next start"));
      return;
    }
    LogError(absl::StrCat("cannot flush ", layers, " applied batches to LMDB, retrying in ",
                          backoff.count(), "ms: ", s.message()));
    const absl::Time retry = absl::Now() + absl::FromChrono(backoff);
    while (!stopping_ && !pending_changed_.WaitWithDeadline(&pending_mu_, retry)) {
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(30000));
  }
}

absl::Status Flusher::WriteLayers(const PendingLayers& layers, WriteTxn* txn) {
  size_t dbs = 0;
  for (const auto& layer : layers) dbs = std::max(dbs, layer->dbs.size());
  // Per database, the last write of each key across the layers, in key order: a k-way merge
  // of the layers' sorted entries, without copying a key.
  struct Head {
    PendingLayer::Entries::const_iterator it, end;
    size_t layer;  // the newer layer's entry wins a key
  };
  // A heap's top is its greatest element: the smallest key, of the newest layer among equals.
  auto after = [](const Head& a, const Head& b) {
    const int c = a.it->first.compare(b.it->first);
    return c != 0 ? c > 0 : a.layer < b.layer;
  };
  std::vector<Head> heads;
  // Moves the head just popped (at the back) to its next entry, or drops it at its end.
  auto step = [&] {
    if (++heads.back().it != heads.back().end) {
      std::push_heap(heads.begin(), heads.end(), after);
    } else {
      heads.pop_back();
    }
  };
  for (size_t dbi = 0; dbi < dbs; ++dbi) {
    const MDB_dbi d = static_cast<MDB_dbi>(dbi);
    // A cleared database: what the older layers and LMDB hold is gone.
    size_t first = 0;
    for (size_t i = 0; i < layers.size(); ++i) {
      const PendingLayer::Db* db = layers[i]->db(d);
      if (db != nullptr && db->cleared) first = i + 1;
    }
    if (first > 0) {
      if (absl::Status s = txn->Clear(d); !s.ok()) return s;
    }
    heads.clear();
    for (size_t i = first > 0 ? first - 1 : 0; i < layers.size(); ++i) {
      const PendingLayer::Db* db = layers[i]->db(d);
      if (db != nullptr && !db->entries.empty()) {
        heads.push_back(Head{db->entries.begin(), db->entries.end(), i});
      }
    }
    std::make_heap(heads.begin(), heads.end(), after);
    while (!heads.empty()) {
      std::pop_heap(heads.begin(), heads.end(), after);
      const std::string& key = heads.back().it->first;
      const PendingLayer::Entry& entry = heads.back().it->second;
      absl::Status s;
      switch (entry.op) {
        case PendingLayer::Op::kPut:
          s = txn->Put(d, key, entry.value);
          break;
        case PendingLayer::Op::kAppend:
          s = txn->AppendOrPut(d, key, entry.value);
          break;
        case PendingLayer::Op::kDelete:
          s = txn->Delete(d, key);
          break;
      }
      if (!s.ok()) return s;
      // Every layer standing on this key moves past it (older writes of the key are dropped).
      const std::string_view written = key;  // the node stays when its iterator moves
      step();
      while (!heads.empty() && heads.front().it->first == written) {
        std::pop_heap(heads.begin(), heads.end(), after);
        step();
      }
    }
  }
  return txn->Put(store_->meta(), kFlushedKey, std::to_string(layers.back()->sequence));
}

}  // namespace cdcview
