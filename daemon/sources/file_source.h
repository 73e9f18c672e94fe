// FileSource: change events from a file of DynamoDB Streams records, one `Records[]`
// element per line (NDJSON), such as the bundled examples/app-stream.ndjson. The embedded
// default source: no broker, no AWS account.
//
// The file is one partition (""). A record's next_position is
// "<byte offset>:<line number>:<generation>:<inode>" of the line after it: the offset and line
// in the file with that inode, `generation` counting the times the source went back to the
// start of a file (truncated or rotated), so that positions order as (generation, offset).
// Start seeks to a stored position (also the older "<byte offset>:<line number>", generation 0
// and any inode) and numbers lines from there, so a restart reads exactly the lines not yet
// applied. A line that does not decode is handed on as a rejection ("line 17:
// dynamodb.Keys: is required"), never dropped; so is a line longer than
// file.max_line_bytes (record_too_large), of which only the first kOversizedRecordHeadBytes
// are kept, and reading goes on after it.
//
// With follow the source waits for the file to grow and follows it as `tail -F` does:
// * truncated (its size below what was read): reads it again from the start;
// * rotated (another file at the path, by device and inode): reads the rest of the open file
//   to its end, its unterminated last line included, then the new file from its start;
// each logged and counted (FileProbe). A restart with follow whose stored inode is not the
// path's looks for that inode among the path's directory's files (a rotated "x.ndjson.1"),
// reads its rest first if found, else logs that the rest is lost, and reads the path from its
// start; a stored offset past the end of the same file is a truncation. Without follow both
// are errors. Not detectable: a file truncated and grown past the position between two polls
// (100 ms), or a rotated file deleted and its inode given to the new one.
//
// Threading: Start, Stop, Health and dead_letters may be called from any thread. Reading
// happens on one thread the source owns; Stop joins it, within about 100 ms even while the
// queue is full and nobody drains it (the unpushed record is read again after a restart).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/config/config.h"
#include "daemon/decode/dynamodb_json.h"
#include "daemon/metrics/file_probe.h"
#include "daemon/sources/change_source.h"

namespace cdcview {

// Appends one JSON line per rejected record to a file, creating its parent directories:
//   {"source":"sample","locator":"line 17","reason":"<why>","record":"<raw line>"}
// A raw record that is not valid UTF-8 is written as "record_base64" instead of "record",
// so the dead-letter file stays valid NDJSON. A record too large to keep (raw_bytes set) has
// its first bytes in "record" and its size in "record_bytes". Each line is flushed to the OS (not fsynced:
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
  // messages); `config` is copied; `probe` may be null (tests).
  FileSource(uint32_t source_index, const SourceConfig& config,
             std::unique_ptr<FileProbe> probe = nullptr);
  ~FileSource() override;  // stops the reader

  // Opens the file and starts reading from positions[""], or from the start when there is
  // none. Errors, also reported by Health as "error": NOT_FOUND / PERMISSION_DENIED ... with
  // `cannot open "PATH": <reason>; check sources[i].file.path`; INVALID_ARGUMENT for a
  // position this source did not write; FAILED_PRECONDITION when the position does not fit
  // the file (without follow: it was truncated or replaced; with follow: not at a line start)
  // or the source was already started.
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
    uint64_t offset = 0;      // byte offset of the next line
    uint64_t line = 1;        // its line number
    uint64_t generation = 0;  // times the source went back to the start of a file
    uint64_t inode = 0;       // of the file read; 0: not known (an older position)
  };
  // A line longer than max_line_bytes, being skipped: what is kept of it so far.
  struct Oversized {
    std::string head;    // its first kOversizedRecordHeadBytes
    uint64_t bytes = 0;  // read so far, without the line end
  };
  // What the reader thread holds between reads of one file.
  struct Reading {
    int fd = -1;
    Cursor cursor;
    std::string pending;  // bytes after cursor.offset that do not end a line yet
    std::optional<Oversized> oversized;
  };

  // Opens the file for `cursor`, moving `cursor` to where reading starts (see the header
  // comment for a rotation or truncation while stopped). Start's errors.
  absl::Status Open(Cursor* cursor, int* fd);
  void Run(Reading reading, RecordQueue* queue);
  // Hands on every line `data` completes; false when the source should stop.
  bool Consume(DynamoDbJsonDecoder* decoder, std::string_view data, Reading* reading,
               RecordQueue* queue);
  // The file is read to its end: its unterminated last line (or oversized one) is complete.
  bool FinishFile(DynamoDbJsonDecoder* decoder, Reading* reading, RecordQueue* queue);
  // Hands on every complete line in `pending` (advancing `cursor` past them and erasing
  // them); false when the source should stop. `scanned` bytes of `pending` are known to
  // hold no '\n'; `decoder` belongs to the reader thread.
  bool EmitLines(DynamoDbJsonDecoder* decoder, std::string* pending, size_t scanned,
                 Cursor* cursor, RecordQueue* queue);
  bool EmitLine(DynamoDbJsonDecoder* decoder, std::string_view line, uint64_t line_bytes,
                Cursor* cursor, RecordQueue* queue);
  // Rejects a line over max_line_bytes: `head` is kept, `bytes` is its size without the
  // line end, `line_bytes` what the cursor moves past.
  bool EmitOversized(std::string head, uint64_t bytes, uint64_t line_bytes, Cursor* cursor,
                     RecordQueue* queue);
  // With follow at the end of the file: whether the path now names another file (rotated),
  // or the file is shorter than what was read (truncated, handled here: read from 0).
  bool Rotated(const Reading& reading);
  bool CheckTruncated(Reading* reading);
  // Switches to the file now at the path, from its start; false if it cannot be opened yet.
  bool OpenRotated(Reading* reading);
  void RecordReopen(FileProbe::Reopen reason, const std::string& message);
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
  const std::unique_ptr<FileProbe> probe_;  // may be null

  mutable absl::Mutex mu_;
  absl::CondVar stop_cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  SourceHealth health_ ABSL_GUARDED_BY(mu_);
  absl::Mutex start_stop_mu_;
  std::thread thread_ ABSL_GUARDED_BY(start_stop_mu_);
};

}  // namespace cdcview
