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
constexpr std::chrono::milliseconds kPollInterval{100};

// Abseil here has its own string_view type (ABSL_OPTION_USE_STD_STRING_VIEW 0).
absl::string_view ToAbsl(std::string_view text) { return {text.data(), text.size()}; }
std::string_view ToStd(absl::string_view text) { return {text.data(), text.size()}; }

bool ParseNumber(std::string_view text, uint64_t* out) {
  if (text.empty()) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return error == std::errc() && end == text.data() + text.size();
}

std::string FormatPosition(uint64_t offset, uint64_t line, uint64_t generation, uint64_t inode) {
  return absl::StrCat(offset, ":", line, ":", generation, ":", inode);
}

// "<byte offset>:<line number>:<generation>:<inode>", as FormatPosition writes it, or the
// older "<byte offset>:<line number>" (generation 0, inode 0: not known).
bool ParsePosition(std::string_view text, uint64_t* offset, uint64_t* line, uint64_t* generation,
                   uint64_t* inode) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon == std::string_view::npos ? colon : colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  *generation = 0;
  *inode = 0;
  if (parts.size() != 2 && parts.size() != 4) return false;
  if (parts.size() == 4 &&
      !(ParseNumber(parts[2], generation) && ParseNumber(parts[3], inode) && *inode != 0)) {
    return false;
  }
  return ParseNumber(parts[0], offset) && ParseNumber(parts[1], line) && *line >= 1;
}

bool IsBlank(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t' && c != '\r') return false;
  }
  return true;
}

std::string Quoted(std::string_view text) { return absl::StrCat("\"", ToAbsl(text), "\""); }

// OK if a position at `offset` can be resumed in the file open as `fd` (`size` bytes): it is
// within the file and follows a line end (or is the end of an unterminated last line).
absl::Status FitsFile(int fd, uint64_t size, uint64_t offset, const std::string& position,
                      const std::string& path) {
  char before = '\n';
  if (offset > size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stored position ", position, " is past the end of ", Quoted(path), " (", size,
        " bytes): the file was truncated or replaced; restore it or start a new store"));
  }
  if (offset > 0 && offset < size &&
      (::pread(fd, &before, 1, static_cast<off_t>(offset - 1)) != 1 || before != '\n')) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stored position ", position, " is not at the start of a line in ", Quoted(path),
        ": the file was changed or replaced; restore it or start a new store"));
  }
  return absl::OkStatus();
}

// Opens the regular file in `dir` whose inode is `inode` (a file rotated away from the path
// the source reads, such as "stream.ndjson.1"); -1 if there is none. `*name` is its path.
int OpenByInode(const std::filesystem::path& dir, uint64_t inode, std::string* name) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    struct stat st {};
    if (::stat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
        static_cast<uint64_t>(st.st_ino) != inode) {
      continue;
    }
    int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC);
    struct stat opened {};
    if (fd >= 0 && ::fstat(fd, &opened) == 0 && opened.st_ino == st.st_ino) {
      *name = entry.path().string();
      return fd;
    }
    if (fd >= 0) ::close(fd);
  }
  return -1;
}

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
  if (record.raw_bytes > 0) absl::StrAppend(&line, ",\"record_bytes\":", record.raw_bytes);
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

FileSource::FileSource(uint32_t source_index, const SourceConfig& config,
                       std::unique_ptr<FileProbe> probe)
    : index_(source_index),
      config_(config),
      dead_letters_(config.name, config.file.dead_letter_path),
      probe_(std::move(probe)) {
  health_.state = SourceState::kStopped;
}

FileSource::~FileSource() { Stop(); }

absl::Status FileSource::Open(Cursor* cursor, int* fd_out) {
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
  // As it was stored: an older position has no generation and inode.
  const std::string position = Quoted(
      cursor->inode == 0
          ? absl::StrCat(cursor->offset, ":", cursor->line)
          : FormatPosition(cursor->offset, cursor->line, cursor->generation, cursor->inode));
  const uint64_t inode = static_cast<uint64_t>(st.st_ino);
  absl::Status status;
  if (cursor->inode != 0 && cursor->inode != inode) {
    if (!config_.file.follow) {
      status = absl::FailedPreconditionError(absl::StrCat(
          Quoted(path), " (inode ", inode, ") is not the file stored position ", position,
          " was read from: it was replaced; restore it, set follow: true to read the new file "
          "from its start, or start a new store"));
    } else {
      // Rotated while stopped: the rest of the old file first, if it is still beside it.
      std::string old_name;
      const std::filesystem::path dir = std::filesystem::path(path).parent_path();
      int old_fd = OpenByInode(dir.empty() ? "." : dir, cursor->inode, &old_name);
      struct stat old_st {};
      if (old_fd >= 0 && ::fstat(old_fd, &old_st) == 0 &&
          FitsFile(old_fd, static_cast<uint64_t>(old_st.st_size), cursor->offset, position,
                   old_name)
              .ok()) {
        LogInfo(absl::StrCat("source ", config_.name, ": ", Quoted(path),
                             " was rotated while stopped; reading the rest of ",
                             Quoted(old_name), " (inode ", cursor->inode, ") from byte ",
                             cursor->offset, " first, then ", Quoted(path), " from its start"));
        ::close(fd);
        fd = old_fd;
        st = old_st;
      } else {
        if (old_fd >= 0) ::close(old_fd);
        RecordReopen(FileProbe::Reopen::kRotated,
                     absl::StrCat(Quoted(path), " was rotated while stopped and the file read "
                                                "before (inode ",
                                  cursor->inode, ") is not in its directory: whatever it held "
                                                 "after byte ",
                                  cursor->offset, " was not read; reading ", Quoted(path),
                                  " (inode ", inode, ") from its start"));
        *cursor = Cursor{0, 1, cursor->generation + 1, inode};
      }
    }
  } else if (config_.file.follow && cursor->offset > static_cast<uint64_t>(st.st_size)) {
    RecordReopen(FileProbe::Reopen::kTruncated,
                 absl::StrCat(Quoted(path), " was truncated to ", st.st_size,
                              " bytes while stopped, below stored position ", position,
                              ": reading it again from its start"));
    *cursor = Cursor{0, 1, cursor->generation + 1, inode};
  }
  if (status.ok()) {
    status = FitsFile(fd, static_cast<uint64_t>(st.st_size), cursor->offset, position, path);
  }
  if (status.ok() && ::lseek(fd, static_cast<off_t>(cursor->offset), SEEK_SET) < 0) {
    status = open_error(errno);
  }
  if (!status.ok()) {
    ::close(fd);
    return status;
  }
  cursor->inode = static_cast<uint64_t>(st.st_ino);
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
  Reading reading;
  Cursor& cursor = reading.cursor;
  if (auto it = positions.find(""); it != positions.end()) {
    if (!ParsePosition(it->second, &cursor.offset, &cursor.line, &cursor.generation,
                       &cursor.inode)) {
      absl::Status status = absl::InvalidArgumentError(absl::StrCat(
          "stored position ", Quoted(it->second), " of source \"", config_.name,
          "\" is not \"<byte offset>:<line number>:<generation>:<inode>\""));
      SetError(std::string(ToStd(status.message())));
      return status;
    }
  }
  if (absl::Status status = Open(&cursor, &reading.fd); !status.ok()) {
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
  thread_ = std::thread(&FileSource::Run, this, std::move(reading), queue);
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

void FileSource::RecordReopen(FileProbe::Reopen reason, const std::string& message) {
  LogWarning(absl::StrCat("source ", config_.name, ": ", message));
  if (probe_ != nullptr) probe_->RecordReopen(reason);
}

bool FileSource::WaitForGrowth() {
  const absl::Time deadline = absl::Now() + absl::FromChrono(kPollInterval);
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    if (stop_cv_.WaitWithDeadline(&mu_, deadline)) break;  // timed out
  }
  return !stop_;
}

void FileSource::Run(Reading reading, RecordQueue* queue) {
  pthread_setname_np(pthread_self(), absl::StrCat("file:", config_.name).substr(0, 15).c_str());
  DynamoDbJsonDecoder decoder;
  std::vector<char> chunk(kReadChunk);
  // The path names another file: the open one is read to its end before switching to it.
  bool draining = false;
  while (!stopping()) {
    ssize_t n = ::read(reading.fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      SetError(absl::StrCat("cannot read ", Quoted(config_.file.path), ": ",
                            std::strerror(errno)));
      break;
    }
    if (n > 0) {
      SetState(SourceState::kRunning);
      if (!Consume(&decoder, std::string_view(chunk.data(), static_cast<size_t>(n)), &reading,
                   queue)) {
        break;
      }
      continue;
    }
    // End of file. A last line without '\n' is complete only if the file is.
    if (!config_.file.follow) {
      if (!FinishFile(&decoder, &reading, queue)) break;
      SetState(SourceState::kFinished);
      break;
    }
    if (draining) {
      if (!FinishFile(&decoder, &reading, queue)) break;
      if (OpenRotated(&reading)) {
        draining = false;
        continue;
      }
    } else if (Rotated(reading)) {
      // Read once more: lines appended just before the rename are still in the old file.
      draining = true;
      continue;
    } else if (CheckTruncated(&reading)) {
      continue;
    }
    SetState(SourceState::kCaughtUp);
    if (!WaitForGrowth()) break;
  }
  ::close(reading.fd);
}

bool FileSource::Consume(DynamoDbJsonDecoder* decoder, std::string_view data, Reading* reading,
                         RecordQueue* queue) {
  if (reading->oversized) {
    // Skipping a line too long to keep: only its end matters.
    const size_t end = data.find('\n');
    if (end == std::string_view::npos) {
      reading->oversized->bytes += data.size();
      return true;
    }
    Oversized oversized = *std::move(reading->oversized);
    reading->oversized.reset();
    const uint64_t bytes = oversized.bytes + end;
    if (!EmitOversized(std::move(oversized.head), bytes, bytes + 1, &reading->cursor, queue)) {
      return false;
    }
    data.remove_prefix(end + 1);
  }
  const size_t scanned = reading->pending.size();  // no line end before this: searched already
  reading->pending.append(data.data(), data.size());
  if (!EmitLines(decoder, &reading->pending, scanned, &reading->cursor, queue)) return false;
  if (reading->pending.size() > config_.file.max_line_bytes) {
    // Never hold more of one line than the limit: keep its head, count the rest.
    reading->oversized = Oversized{RecordHead(reading->pending), reading->pending.size()};
    std::string().swap(reading->pending);
  }
  return true;
}

bool FileSource::FinishFile(DynamoDbJsonDecoder* decoder, Reading* reading, RecordQueue* queue) {
  bool go_on = true;
  if (reading->oversized) {
    const uint64_t bytes = reading->oversized->bytes;
    go_on = EmitOversized(std::move(reading->oversized->head), bytes, bytes, &reading->cursor,
                          queue);
    reading->oversized.reset();
  } else if (!reading->pending.empty()) {
    go_on = EmitLine(decoder, reading->pending, reading->pending.size(), &reading->cursor, queue);
    reading->pending.clear();
  }
  return go_on;
}

bool FileSource::Rotated(const Reading& reading) {
  struct stat at_path {}, open {};
  // No file at the path (renamed away, the new one not created yet): keep reading the old.
  if (::stat(config_.file.path.c_str(), &at_path) != 0 || ::fstat(reading.fd, &open) != 0) {
    return false;
  }
  return at_path.st_ino != open.st_ino || at_path.st_dev != open.st_dev;
}

bool FileSource::CheckTruncated(Reading* reading) {
  struct stat st {};
  const off_t read_to = ::lseek(reading->fd, 0, SEEK_CUR);
  if (::fstat(reading->fd, &st) != 0 || read_to < 0 || st.st_size >= read_to) return false;
  if (::lseek(reading->fd, 0, SEEK_SET) < 0) return false;
  RecordReopen(FileProbe::Reopen::kTruncated,
               absl::StrCat(Quoted(config_.file.path), " was truncated to ", st.st_size,
                            " bytes, below the ", read_to,
                            " read: reading it again from its start"));
  reading->pending.clear();
  reading->oversized.reset();
  reading->cursor = Cursor{0, 1, reading->cursor.generation + 1, reading->cursor.inode};
  return true;
}

bool FileSource::OpenRotated(Reading* reading) {
  int fd = ::open(config_.file.path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    if (fd >= 0) ::close(fd);
    return false;  // gone again: try at the next poll
  }
  RecordReopen(FileProbe::Reopen::kRotated,
               absl::StrCat(Quoted(config_.file.path), " was rotated: read the old file (inode ",
                            reading->cursor.inode, ") to its end, line ",
                            reading->cursor.line - 1, "; reading the new one (inode ", st.st_ino,
                            ") from its start"));
  ::close(reading->fd);
  reading->fd = fd;
  reading->cursor =
      Cursor{0, 1, reading->cursor.generation + 1, static_cast<uint64_t>(st.st_ino)};
  return true;
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
  if (line.size() > config_.file.max_line_bytes) {
    return EmitOversized(RecordHead(line), line.size(), line_bytes, cursor, queue);
  }
  const uint64_t number = cursor->line;
  cursor->offset += line_bytes;
  cursor->line += 1;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (stopping()) return false;
  if (IsBlank(line)) return true;  // its bytes are covered by the next record's position

  SourceRecord record;
  record.source = index_;
  record.next_position =
      FormatPosition(cursor->offset, cursor->line, cursor->generation, cursor->inode);
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

bool FileSource::EmitOversized(std::string head, uint64_t bytes, uint64_t line_bytes,
                               Cursor* cursor, RecordQueue* queue) {
  const uint64_t number = cursor->line;
  cursor->offset += line_bytes;
  cursor->line += 1;
  if (stopping()) return false;
  SourceRecord record;
  record.source = index_;
  record.next_position =
      FormatPosition(cursor->offset, cursor->line, cursor->generation, cursor->inode);
  record.locator = absl::StrCat("line ", number);
  record.raw = std::move(head);
  record.raw_bytes = bytes;
  record.reason = "record_too_large";
  record.rejection = absl::InvalidArgumentError(absl::StrCat(
      record.locator, ": the line is ", bytes, " bytes, longer than file.max_line_bytes (",
      config_.file.max_line_bytes, "); only its first ", record.raw.size(),
      " bytes are kept. Is the file NDJSON, one stream record per line?"));
  return Push(&record, queue);
}

bool FileSource::Push(SourceRecord* record, RecordQueue* queue) {
  return queue->PushUnless(std::move(*record), [this] { return stopping(); });
}

}  // namespace cdcview
