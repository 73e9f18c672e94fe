// FileSource: change events from a file of DynamoDB Streams records, one `Records[]`
// element per line (NDJSON), such as the bundled examples/app-stream.ndjson. The embedded
// default source: no broker, no AWS account.
//
// The file is one partition (""). A record's next_position is "<byte offset>:<line number>"
// of the line after it; Start seeks to a stored position and numbers lines from there, so a
// restart reads exactly the lines not yet applied. A line that does not decode is handed on
// as a rejection ("line 17: dynamodb.Keys: is required"), never dropped. With follow the
// source waits for the file to grow (tail -f); it does not notice a file being replaced or
// truncated while it reads (a restart does: the stored position no longer fits).
//
// Threading: Start, Stop, Health and dead_letters may be called from any thread. Reading
// happens on one thread the source owns; Stop joins it, within about 100 ms even while the
// queue is full and nobody drains it (the unpushed record is read again after a restart).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/config/config.h"
#include "daemon/decode/dynamodb_json.h"
#include "daemon/sources/change_source.h"

namespace cdcview {

// Appends one JSON line per rejected record to a file, creating its parent directories:
//   {"source":"sample","locator":"line 17","reason":"<why>","record":"<raw line>"}
// A raw record that is not valid UTF-8 is written as "record_base64" instead of "record",
// so the dead-letter file stays valid NDJSON. Each line is flushed to the OS (not fsynced:
// the writer calls Write before the batch commits, so a crash repeats a dead letter at
// worst). Thread-safe.
class FileDeadLetterSink : public DeadLetterSink {
 public:
  FileDeadLetterSink(std::string source_name, std::string path);
  ~FileDeadLetterSink() override;
  FileDeadLetterSink(const FileDeadLetterSink&) = delete;
  FileDeadLetterSink& operator=(const FileDeadLetterSink&) = delete;

  // Errors name the path: a directory that cannot be created, a file that cannot be
  // opened or written (FAILED_PRECONDITION if no path is configured).
  absl::Status Write(const SourceRecord& record, const absl::Status& why) override;

  const std::string& path() const { return path_; }
  // Opens the file now if a path is configured, so that a later shortage of descriptors
  // cannot stop the writer at its first dead letter. The errors are Write's; after one,
  // Write tries again.
  absl::Status Open();

 private:
  absl::Status OpenLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string source_name_;
  const std::string path_;
  absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_) = nullptr;  // opened by Open or the first Write
};

class FileSource : public ChangeSource {
 public:
  // `source_index` is the source's place in Config::sources (for SourceRecord::source and
  // messages); `config` is copied.
  FileSource(uint32_t source_index, const SourceConfig& config);
  ~FileSource() override;  // stops the reader

  // Opens the file and starts reading from positions[""] ("<byte offset>:<line number>"),
  // or from the start when there is none. Errors, also reported by Health as "error":
  // NOT_FOUND / PERMISSION_DENIED ... with `cannot open "PATH": <reason>; check
  // sources[i].file.path`; INVALID_ARGUMENT for a position this source did not write;
  // FAILED_PRECONDITION when the position does not fit the file (it was truncated or
  // replaced) or the source was already started.
  absl::Status Start(const std::map<std::string, std::string>& positions,
                     RecordQueue* queue) override;
  void Stop() override;
  // "running" while reading; with follow "caught_up" while waiting at the end of the file;
  // without follow "finished" after the last line; "error" with what to do; "stopped"
  // before Start and after Stop.
  SourceHealth Health() const override;
  DeadLetterSink* dead_letters() override { return &dead_letters_; }
  std::string_view kind() const override { return SourceKindName(SourceKind::kFile); }

 private:
  struct Cursor {
    uint64_t offset = 0;  // byte offset of the next line
    uint64_t line = 1;    // its line number
  };

  absl::Status Open(const Cursor& cursor, int* fd);
  void Run(int fd, Cursor cursor, RecordQueue* queue);
  // Hands on every complete line in `pending` (advancing `cursor` past them and erasing
  // them); false when the source should stop. `scanned` bytes of `pending` are known to
  // hold no '\n'; `decoder` belongs to the reader thread.
  bool EmitLines(DynamoDbJsonDecoder* decoder, std::string* pending, size_t scanned,
                 Cursor* cursor, RecordQueue* queue);
  bool EmitLine(DynamoDbJsonDecoder* decoder, std::string_view line, uint64_t line_bytes,
                Cursor* cursor, RecordQueue* queue);
  // Pushes, waiting while the queue is full; false when stopped or the queue was closed.
  bool Push(SourceRecord* record, RecordQueue* queue);
  // Waits up to the poll interval; false when Stop was called.
  bool WaitForGrowth();
  bool stopping() const;
  void SetState(SourceState state);
  void SetError(std::string message);

  const uint32_t index_;
  const SourceConfig config_;
  FileDeadLetterSink dead_letters_;

  mutable absl::Mutex mu_;
  absl::CondVar stop_cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  SourceHealth health_ ABSL_GUARDED_BY(mu_);
  absl::Mutex start_stop_mu_;
  std::thread thread_ ABSL_GUARDED_BY(start_stop_mu_);
};

}  // namespace cdcview
