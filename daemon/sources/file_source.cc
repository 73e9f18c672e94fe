#include "daemon/sources/file_source.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/decode/base64.h"
#include "daemon/decode/json_escape.h"
#include "daemon/log/log.h"
#include "daemon/sources/record_queue.h"

namespace cdcview {
namespace {

constexpr size_t kReadChunk = 256 * 1024;
// DynamoDB items are at most 400 KB, so a record with both images stays far below this;
// anything longer is not a stream record file at all.
constexpr size_t kMaxLineBytes = 16 * 1024 * 1024;
constexpr std::chrono::milliseconds kPollInterval{100};

// Abseil here has its own string_view type (ABSL_OPTION_USE_STD_STRING_VIEW 0).
absl::string_view ToAbsl(std::string_view text) { return {text.data(), text.size()}; }
std::string_view ToStd(absl::string_view text) { return {text.data(), text.size()}; }

std::string FormatPosition(uint64_t offset, uint64_t line) {
  return absl::StrCat(offset, ":", line);
}

bool ParseNumber(std::string_view text, uint64_t* out) {
  if (text.empty()) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return error == std::errc() && end == text.data() + text.size();
}

// "<byte offset>:<line number>", as FormatPosition writes it.
bool ParsePosition(std::string_view text, uint64_t* offset, uint64_t* line) {
  size_t colon = text.find(':');
  if (colon == std::string_view::npos) return false;
  return ParseNumber(text.substr(0, colon), offset) &&
         ParseNumber(text.substr(colon + 1), line) && *line >= 1;
}

bool IsBlank(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t' && c != '\r') return false;
  }
  return true;
}

std::string Quoted(std::string_view text) { return absl::StrCat("\"", ToAbsl(text), "\""); }

}  // namespace

// ---- FileDeadLetterSink ----

FileDeadLetterSink::FileDeadLetterSink(std::string source_name, std::string path)
    : source_name_(std::move(source_name)), path_(std::move(path)) {}

FileDeadLetterSink::~FileDeadLetterSink() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status FileDeadLetterSink::OpenLocked() {
  if (path_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "source \"", source_name_, "\" has no dead-letter file; set its file.dead_letter_path"));
  }
  std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  std::error_code error;
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  if (error) {
    return absl::Status(absl::ErrnoToStatusCode(error.value()),
                        absl::StrCat("cannot create directory ", Quoted(parent.string()),
                                     " for dead letters: ", error.message()));
  }
  file_ = std::fopen(path_.c_str(), "ae");
  if (file_ == nullptr) {
    int e = errno;
    return absl::Status(absl::ErrnoToStatusCode(e),
                        absl::StrCat("cannot open dead-letter file ", Quoted(path_), ": ",
                                     std::strerror(e)));
  }
  return absl::OkStatus();
}

absl::Status FileDeadLetterSink::Open() {
  absl::MutexLock lock(&mu_);
  if (file_ != nullptr || path_.empty()) return absl::OkStatus();
  return OpenLocked();
}

absl::Status FileDeadLetterSink::Write(const SourceRecord& record, const absl::Status& why) {
  std::string line = "{\"source\":";
  AppendJsonString(source_name_, &line);
  line += ",\"locator\":";
  AppendJsonString(record.locator, &line);
  line += ",\"reason\":";
  AppendJsonString(ToStd(why.message()), &line);
  if (IsValidUtf8(record.raw)) {
    line += ",\"record\":";
    AppendJsonString(record.raw, &line);
  } else {
    line += ",\"record_base64\":";
    AppendJsonString(Base64Encode(record.raw), &line);
  }
  line += "}\n";

  absl::MutexLock lock(&mu_);
  if (file_ == nullptr) {
    if (absl::Status s = OpenLocked(); !s.ok()) return s;
  }
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() ||
      std::fflush(file_) != 0) {
    int e = errno;
    std::clearerr(file_);
    return absl::Status(absl::ErrnoToStatusCode(e),
                        absl::StrCat("cannot write dead-letter file ", Quoted(path_), ": ",
                                     std::strerror(e)));
  }
  return absl::OkStatus();
}

// ---- FileSource ----

FileSource::FileSource(uint32_t source_index, const SourceConfig& config)
    : index_(source_index),
      config_(config),
      dead_letters_(config.name, config.file.dead_letter_path) {
  health_.state = SourceState::kStopped;
}

FileSource::~FileSource() { Stop(); }

absl::Status FileSource::Open(const Cursor& cursor, int* fd_out) {
  const std::string& path = config_.file.path;
  auto open_error = [&](int e) {
    return absl::Status(absl::ErrnoToStatusCode(e),
                        absl::StrCat("cannot open ", Quoted(path), ": ", std::strerror(e),
                                     "; check sources[", index_, "].file.path"));
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return open_error(errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    int e = S_ISDIR(st.st_mode) ? EISDIR : errno;
    ::close(fd);
    return open_error(e);
  }
  absl::Status status;
  const std::string position = Quoted(FormatPosition(cursor.offset, cursor.line));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  char before = '\n';
  if (cursor.offset > size) {
    status = absl::FailedPreconditionError(absl::StrCat(
        "stored position ", position, " is past the end of ", Quoted(path), " (", size,
        " bytes): the file was truncated or replaced; restore it or start a new store"));
  } else if (cursor.offset > 0 && cursor.offset < size &&
             (::pread(fd, &before, 1, static_cast<off_t>(cursor.offset - 1)) != 1 ||
              before != '\n')) {
    // A position always follows a line end (or the end of a file's unterminated last line).
    status = absl::FailedPreconditionError(absl::StrCat(
        "stored position ", position, " is not at the start of a line in ", Quoted(path),
        ": the file was changed or replaced; restore it or start a new store"));
  } else if (::lseek(fd, static_cast<off_t>(cursor.offset), SEEK_SET) < 0) {
    status = open_error(errno);
  }
  if (!status.ok()) {
    ::close(fd);
    return status;
  }
  *fd_out = fd;
  return absl::OkStatus();
}

absl::Status FileSource::Start(const std::map<std::string, std::string>& positions,
                               RecordQueue* queue) {
  absl::MutexLock start_stop(&start_stop_mu_);
  if (thread_.joinable()) {
    return absl::FailedPreconditionError(
        absl::StrCat("source \"", config_.name, "\" is already started"));
  }
  Cursor cursor;
  if (auto it = positions.find(""); it != positions.end()) {
    if (!ParsePosition(it->second, &cursor.offset, &cursor.line)) {
      absl::Status status = absl::InvalidArgumentError(absl::StrCat(
          "stored position ", Quoted(it->second), " of source \"", config_.name,
          "\" is not \"<byte offset>:<line number>\""));
      SetError(std::string(ToStd(status.message())));
      return status;
    }
  }
  int fd = -1;
  if (absl::Status status = Open(cursor, &fd); !status.ok()) {
    SetError(std::string(ToStd(status.message())));
    return status;
  }
  if (absl::Status status = dead_letters_.Open(); !status.ok()) {
    // Not fatal yet: the source may never dead-letter, and the first Write tries again.
    LogWarning(absl::StrCat("source \"", config_.name, "\": ", status.message(),
                            "; trying again at the first dead letter"));
  }
  {
    absl::MutexLock lock(&mu_);
    stop_ = false;
    health_ = SourceHealth{SourceState::kRunning, ""};
  }
  thread_ = std::thread(&FileSource::Run, this, fd, cursor, queue);
  return absl::OkStatus();
}

void FileSource::Stop() {
  absl::MutexLock start_stop(&start_stop_mu_);
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  stop_cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  if (health_.state == SourceState::kRunning || health_.state == SourceState::kCaughtUp) {
    health_ = SourceHealth{SourceState::kStopped, ""};
  }
}

SourceHealth FileSource::Health() const {
  absl::MutexLock lock(&mu_);
  return health_;
}

bool FileSource::stopping() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

void FileSource::SetState(SourceState state) {
  absl::MutexLock lock(&mu_);
  if (health_.state != SourceState::kError) health_ = SourceHealth{state, ""};
}

void FileSource::SetError(std::string message) {
  absl::MutexLock lock(&mu_);
  health_ = SourceHealth{SourceState::kError, std::move(message)};
}

bool FileSource::WaitForGrowth() {
  const absl::Time deadline = absl::Now() + absl::FromChrono(kPollInterval);
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    if (stop_cv_.WaitWithDeadline(&mu_, deadline)) break;  // timed out
  }
  return !stop_;
}

void FileSource::Run(int fd, Cursor cursor, RecordQueue* queue) {
  pthread_setname_np(pthread_self(), absl::StrCat("file:", config_.name).substr(0, 15).c_str());
  DynamoDbJsonDecoder decoder;
  std::string pending;  // bytes after cursor.offset that do not end a line yet
  std::vector<char> chunk(kReadChunk);
  while (!stopping()) {
    ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      SetError(absl::StrCat("cannot read ", Quoted(config_.file.path), ": ",
                            std::strerror(errno)));
      break;
    }
    if (n > 0) {
      SetState(SourceState::kRunning);
      size_t scanned = pending.size();  // no line end before this: it was searched already
      pending.append(chunk.data(), static_cast<size_t>(n));
      if (!EmitLines(&decoder, &pending, scanned, &cursor, queue)) break;
      if (pending.size() > kMaxLineBytes) {
        SetError(absl::StrCat("line ", cursor.line, " of ", Quoted(config_.file.path),
                              " is longer than ", kMaxLineBytes,
                              " bytes; is it NDJSON, one stream record per line?"));
        break;
      }
      continue;
    }
    // End of file. A last line without '\n' is complete only if the file is.
    if (!config_.file.follow) {
      if (!pending.empty() &&
          !EmitLine(&decoder, pending, pending.size(), &cursor, queue)) {
        break;
      }
      SetState(SourceState::kFinished);
      break;
    }
    SetState(SourceState::kCaughtUp);
    if (!WaitForGrowth()) break;
  }
  ::close(fd);
}

bool FileSource::EmitLines(DynamoDbJsonDecoder* decoder, std::string* pending, size_t scanned,
                           Cursor* cursor, RecordQueue* queue) {
  size_t start = 0;
  size_t end = pending->find('\n', scanned);
  bool go_on = true;
  while (go_on && end != std::string::npos) {
    std::string_view line = std::string_view(*pending).substr(start, end - start);
    go_on = EmitLine(decoder, line, end + 1 - start, cursor, queue);
    start = end + 1;
    end = pending->find('\n', start);
  }
  pending->erase(0, start);
  return go_on;
}

bool FileSource::EmitLine(DynamoDbJsonDecoder* decoder, std::string_view line,
                          uint64_t line_bytes, Cursor* cursor, RecordQueue* queue) {
  const uint64_t number = cursor->line;
  cursor->offset += line_bytes;
  cursor->line += 1;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (stopping()) return false;
  if (IsBlank(line)) return true;  // its bytes are covered by the next record's position

  SourceRecord record;
  record.source = index_;
  record.next_position = FormatPosition(cursor->offset, cursor->line);
  record.locator = absl::StrCat("line ", number);
  record.raw = std::string(line);  // also kept for events: the writer may reject them later
  absl::StatusOr<ChangeEvent> event = decoder->Decode(line);
  if (event.ok()) {
    record.event = *std::move(event);
  } else {
    record.reason = IsMalformedJson(event.status()) ? "malformed_json" : "bad_record";
    record.rejection = absl::Status(
        event.status().code(), absl::StrCat(record.locator, ": ", event.status().message()));
  }
  return Push(&record, queue);
}

bool FileSource::Push(SourceRecord* record, RecordQueue* queue) {
  return queue->PushUnless(std::move(*record), [this] { return stopping(); });
}

}  // namespace cdcview
