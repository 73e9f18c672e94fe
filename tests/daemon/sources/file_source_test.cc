#include "daemon/sources/file_source.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/metrics/file_probe.h"
#include "daemon/metrics/metrics.h"
#include "daemon/sources/record_queue.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

using std::chrono::milliseconds;

// A valid stream record for item P#<n>.
std::string Line(int n) {
  const std::string pk = "P#" + std::to_string(n);
  return R"({"eventName":"INSERT","dynamodb":{"Keys":{"PK":{"S":")" + pk +
         R"("}},"NewImage":{"PK":{"S":")" + pk + R"("}},"SequenceNumber":")" +
         std::to_string(n) + R"("}})";
}

uint64_t InodeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_ino;
}

// A position "<byte offset>:<line>:<generation>:<inode>" in the file at `path` now.
std::string PosIn(const std::string& path, size_t offset, int line, int generation = 0) {
  return std::to_string(offset) + ":" + std::to_string(line) + ":" + std::to_string(generation) +
         ":" + std::to_string(InodeOf(path));
}

// Waits (at most 20 s, so a hang fails instead of blocking) until `done` holds.
bool WaitFor(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

class FileSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = ::testing::TempDir() + "file_source_XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    path_ = dir_ + "/stream.ndjson";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::string& text, std::ios::openmode mode = std::ios::trunc) {
    std::ofstream out(path_, std::ios::binary | std::ios::out | mode);
    out << text;
  }

  SourceConfig Config(bool follow = false) {
    SourceConfig config;
    config.name = "sample";
    config.table = "App";
    config.file.path = path_;
    config.file.follow = follow;
    config.file.dead_letter_path = dir_ + "/dead/sample.ndjson";
    return config;
  }

  // Pops until `n` records arrived (or 20 s passed).
  std::vector<SourceRecord> Take(RecordQueue* queue, size_t n) {
    std::vector<SourceRecord> out;
    WaitFor([&] {
      queue->PopBatchFor(n - out.size(), milliseconds(5), &out);
      return out.size() >= n;
    });
    return out;
  }

  // Runs a non-following source over the file to its end and returns everything it read.
  std::vector<SourceRecord> ReadAll(const std::map<std::string, std::string>& positions = {}) {
    FileSource source(2, Config());
    RecordQueue queue(1000);
    EXPECT_TRUE(source.Start(positions, &queue).ok());
    EXPECT_TRUE(WaitFor([&] { return SourceStateName(source.Health().state) == "finished"; }));
    source.Stop();
    EXPECT_EQ(SourceStateName(source.Health().state), "finished");
    std::vector<SourceRecord> out;
    queue.PopBatchFor(1000, milliseconds(0), &out);
    return out;
  }

  std::string Pos(size_t offset, int line, int generation = 0) const {
    return PosIn(path_, offset, line, generation);
  }

  std::string dir_;
  std::string path_;
};

std::string PkOf(const SourceRecord& r) {
  return r.event ? r.event->keys.at("PK").scalar() : "<rejected>";
}

TEST_F(FileSourceTest, ReadsEveryLineWithExactPositions) {
  const std::string l1 = Line(1), l2 = Line(2), l3 = Line(3);
  Write(l1 + "\n" + l2 + "\n" + l3 + "\n");
  std::vector<SourceRecord> records = ReadAll();
  ASSERT_EQ(records.size(), 3u);
  const size_t o1 = l1.size() + 1, o2 = o1 + l2.size() + 1, o3 = o2 + l3.size() + 1;
  EXPECT_EQ(records[0].next_position, Pos(o1, 2));
  EXPECT_EQ(records[1].next_position, Pos(o2, 3));
  EXPECT_EQ(records[2].next_position, Pos(o3, 4));
  for (int i = 0; i < 3; ++i) {
    const SourceRecord& r = records[i];
    EXPECT_EQ(r.source, 2u);
    EXPECT_EQ(r.partition, "");
    EXPECT_EQ(r.locator, "line " + std::to_string(i + 1));
    EXPECT_EQ(r.raw, Line(i + 1));
    EXPECT_TRUE(r.rejection.ok());
    EXPECT_EQ(r.reason, "");
    EXPECT_EQ(PkOf(r), "P#" + std::to_string(i + 1));
    EXPECT_EQ(r.event->sequence_number, std::to_string(i + 1));
  }
}

TEST_F(FileSourceTest, ResumesFromAStoredPosition) {
  const std::string l1 = Line(1), l2 = Line(2), l3 = Line(3), l4 = Line(4);
  Write(l1 + "\n" + l2 + "\n" + l3 + "\n" + l4 + "\n");
  const size_t o2 = l1.size() + 1 + l2.size() + 1;
  std::vector<SourceRecord> records = ReadAll({{"", Pos(o2, 3)}});
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].locator, "line 3");
  EXPECT_EQ(PkOf(records[0]), "P#3");
  EXPECT_EQ(records[0].next_position, Pos(o2 + l3.size() + 1, 4));
  EXPECT_EQ(records[1].locator, "line 4");
  EXPECT_EQ(PkOf(records[1]), "P#4");
  EXPECT_EQ(records[1].next_position, Pos(o2 + l3.size() + 1 + l4.size() + 1, 5));

  // Resuming from the last position reads nothing.
  EXPECT_TRUE(ReadAll({{"", records[1].next_position}}).empty());
}

TEST_F(FileSourceTest, RejectsBadLinesAndReadsTheRest) {
  const std::string bad_json = R"({"eventName": "INSERT")";
  const std::string bad_record =
      R"({"eventName":"UPSERT","dynamodb":{"Keys":{"PK":{"S":"x"}}}})";
  Write(Line(1) + "\n" + bad_json + "\n" + bad_record + "\n" + Line(4) + "\n");
  std::vector<SourceRecord> records = ReadAll();
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(PkOf(records[0]), "P#1");

  const SourceRecord& malformed = records[1];
  EXPECT_FALSE(malformed.event.has_value());
  EXPECT_EQ(malformed.rejection.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(malformed.rejection.message(),
            "line 2: malformed JSON: JSON document ended early in the middle of an object or "
            "array.");
  EXPECT_EQ(malformed.reason, "malformed_json");
  EXPECT_EQ(malformed.locator, "line 2");
  EXPECT_EQ(malformed.raw, bad_json);
  EXPECT_EQ(malformed.next_position, Pos(Line(1).size() + 1 + bad_json.size() + 1, 3));

  const SourceRecord& bad = records[2];
  EXPECT_FALSE(bad.event.has_value());
  EXPECT_EQ(bad.rejection.message(),
            "line 3: eventName: expected INSERT, MODIFY or REMOVE, got \"UPSERT\"");
  EXPECT_EQ(bad.reason, "bad_record");
  EXPECT_EQ(bad.raw, bad_record);

  EXPECT_EQ(PkOf(records[3]), "P#4");
  EXPECT_EQ(records[3].locator, "line 4");
}

TEST_F(FileSourceTest, SkipsBlankLinesAndTakesAnUnterminatedLastLine) {
  const std::string l1 = Line(1), l2 = Line(2), l3 = Line(3);
  const std::string text = l1 + "\n\n  \n" + l2 + "\r\n" + l3;  // no '\n' after l3
  Write(text);
  std::vector<SourceRecord> records = ReadAll();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].next_position, Pos(l1.size() + 1, 2));
  EXPECT_EQ(records[1].locator, "line 4");
  EXPECT_EQ(records[1].raw, l2);  // without the '\r'
  EXPECT_EQ(PkOf(records[1]), "P#2");
  EXPECT_EQ(records[1].next_position, Pos(l1.size() + 1 + 1 + 3 + l2.size() + 2, 5));
  EXPECT_EQ(records[2].locator, "line 5");
  EXPECT_EQ(PkOf(records[2]), "P#3");
  EXPECT_EQ(records[2].next_position, Pos(text.size(), 6));
}

TEST_F(FileSourceTest, FollowPicksUpAppendedLinesAndWaitsForALineEnd) {
  const std::string l1 = Line(1), l2 = Line(2), l3 = Line(3);
  const std::string half = l2.substr(0, 20);
  Write(l1 + "\n" + half);
  FileSource source(0, Config(/*follow=*/true));
  RecordQueue queue(100);
  ASSERT_TRUE(source.Start({}, &queue).ok());
  // caught_up is reported only after the partial line was read and held back.
  ASSERT_TRUE(WaitFor([&] { return SourceStateName(source.Health().state) == "caught_up"; }));
  std::vector<SourceRecord> first;
  queue.PopBatchFor(100, milliseconds(0), &first);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(PkOf(first[0]), "P#1");
  EXPECT_EQ(first[0].next_position, Pos(l1.size() + 1, 2));

  Write(l2.substr(20) + "\n" + l3 + "\n", std::ios::app);
  std::vector<SourceRecord> more = Take(&queue, 2);
  ASSERT_EQ(more.size(), 2u);
  EXPECT_EQ(PkOf(more[0]), "P#2");
  EXPECT_EQ(more[0].raw, l2);
  EXPECT_EQ(more[0].next_position, Pos(l1.size() + 1 + l2.size() + 1, 3));
  EXPECT_EQ(PkOf(more[1]), "P#3");
  EXPECT_EQ(more[1].locator, "line 3");
  EXPECT_TRUE(WaitFor([&] { return SourceStateName(source.Health().state) == "caught_up"; }));

  source.Stop();
  EXPECT_EQ(SourceStateName(source.Health().state), "stopped");
  EXPECT_EQ(queue.size(), 0u);
}

TEST_F(FileSourceTest, StopsWhileTheQueueIsFullAndNobodyDrainsIt) {
  const std::string l1 = Line(1);
  Write(l1 + "\n" + Line(2) + "\n" + Line(3) + "\n");
  RecordQueue queue(1);
  {
    FileSource source(0, Config());
    ASSERT_TRUE(source.Start({}, &queue).ok());
    ASSERT_TRUE(WaitFor([&] { return queue.size() == 1; }));
    source.Stop();  // must not wait for room that never comes
    EXPECT_EQ(SourceStateName(source.Health().state), "stopped");
  }
  std::vector<SourceRecord> got;
  queue.PopBatchFor(10, milliseconds(0), &got);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].next_position, Pos(l1.size() + 1, 2));
  // The records it could not hand over are read again from the stored position.
  std::vector<SourceRecord> rest = ReadAll({{"", got[0].next_position}});
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(PkOf(rest[0]), "P#2");
  EXPECT_EQ(PkOf(rest[1]), "P#3");
}

TEST_F(FileSourceTest, MissingFileIsAnError) {
  SourceConfig config = Config();
  config.file.path = dir_ + "/nope.ndjson";
  FileSource source(2, config);
  EXPECT_EQ(source.kind(), "file");
  EXPECT_EQ(SourceStateName(source.Health().state), "stopped");
  RecordQueue queue(10);
  absl::Status status = source.Start({}, &queue);
  const std::string expected = "cannot open \"" + dir_ +
                               "/nope.ndjson\": No such file or directory; check "
                               "sources[2].file.path";
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), expected);
  EXPECT_EQ(SourceStateName(source.Health().state), "error");
  EXPECT_EQ(source.Health().error, expected);
}

TEST_F(FileSourceTest, RejectsPositionsThatDoNotFitTheFile) {
  const std::string l1 = Line(1);
  Write(l1 + "\n" + Line(2) + "\n");
  RecordQueue queue(10);
  {
    FileSource source(0, Config());
    absl::Status status = source.Start({{"", "abc"}}, &queue);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(),
              "stored position \"abc\" of source \"sample\" is not \"<byte offset>:<line "
              "number>:<generation>:<inode>\"");
    EXPECT_EQ(SourceStateName(source.Health().state), "error");
  }
  {
    FileSource source(0, Config());
    absl::Status status = source.Start({{"", "99999:3"}}, &queue);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(status.message(),
              "stored position \"99999:3\" is past the end of \"" + path_ + "\" (" +
                  std::to_string(l1.size() + 1 + Line(2).size() + 1) +
                  " bytes): the file was truncated or replaced; restore it or start a new "
                  "store");
  }
  {
    FileSource source(0, Config());
    absl::Status status = source.Start({{"", "5:2"}}, &queue);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(status.message(), "stored position \"5:2\" is not at the start of a line in \"" +
                                    path_ +
                                    "\": the file was changed or replaced; restore it or start "
                                    "a new store");
  }
  EXPECT_EQ(queue.size(), 0u);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_F(FileSourceTest, DeadLetterSinkAppendsOneJsonLinePerRejection) {
  FileSource source(0, Config());
  DeadLetterSink* sink = source.dead_letters();
  SourceRecord record;
  record.locator = "line 17";
  record.raw = "{\"bad\": \"x\ty\"}";
  absl::Status why = absl::InvalidArgumentError("line 17: malformed JSON: oops");
  ASSERT_TRUE(sink->Write(record, why).ok());
  record.locator = "line 18";
  record.raw = std::string("\xff\xfe", 2);  // not UTF-8: kept as base64
  ASSERT_TRUE(sink->Write(record, absl::InvalidArgumentError("line 18: bad")).ok());
  EXPECT_EQ(ReadFile(dir_ + "/dead/sample.ndjson"),
            "{\"source\":\"sample\",\"locator\":\"line 17\",\"reason\":\"line 17: malformed "
            "JSON: oops\",\"record\":\"{\\\"bad\\\": \\\"x\\ty\\\"}\"}\n"
            "{\"source\":\"sample\",\"locator\":\"line 18\",\"reason\":\"line 18: bad\","
            "\"record_base64\":\"//4=\"}\n");
}

TEST_F(FileSourceTest, DeadLetterSinkErrorsNameThePath) {
  FileDeadLetterSink sink("sample", dir_);  // a directory, not a file
  SourceRecord record;
  absl::Status status = sink.Write(record, absl::InvalidArgumentError("x"));
  EXPECT_EQ(status.message(), "cannot open dead-letter file \"" + dir_ + "\": Is a directory");

  FileDeadLetterSink unset("sample", "");
  EXPECT_EQ(unset.Write(record, absl::InvalidArgumentError("x")).message(),
            "source \"sample\" has no dead-letter file; set its file.dead_letter_path");
}

std::string SourceDir() {
  const char* env = std::getenv("CDCVIEW_SOURCE_DIR");
  if (env != nullptr) return env;
  // Run by hand: the repository root is three levels above this file's folder.
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path()
      .parent_path().string();
}

TEST_F(FileSourceTest, ReadsTheBundledSampleWithoutRejections) {
  const std::string sample = SourceDir() + "/examples/app-stream.ndjson";
  const std::string text = ReadFile(sample);
  ASSERT_FALSE(text.empty()) << sample;
  const size_t lines = std::count(text.begin(), text.end(), '\n');
  SourceConfig config = Config();
  config.file.path = sample;
  FileSource source(0, config);
  RecordQueue queue(lines + 1);
  ASSERT_TRUE(source.Start({}, &queue).ok());
  ASSERT_TRUE(WaitFor([&] { return SourceStateName(source.Health().state) == "finished"; }));
  std::vector<SourceRecord> records;
  queue.PopBatchFor(lines + 1, milliseconds(0), &records);
  ASSERT_EQ(records.size(), lines);
  size_t ttl_deletes = 0;
  for (const SourceRecord& r : records) {
    ASSERT_TRUE(r.event.has_value()) << r.locator << ": " << r.rejection;
    ttl_deletes += r.event->ttl_delete ? 1 : 0;
  }
  EXPECT_GT(ttl_deletes, 0u);
  EXPECT_EQ(records.back().next_position,
            PosIn(sample, text.size(), static_cast<int>(lines) + 1));
}


// The line of `n` bytes: '{' then 'x's (not JSON, but only its size matters here).
std::string LongLine(size_t n) { return "{" + std::string(n - 1, 'x'); }

TEST_F(FileSourceTest, ALineOverTheLimitIsRejectedWithItsHeadAndReadingGoesOn) {
  // One over the limit in a single read; one spanning several reads (the reader keeps only its
  // head); an unterminated one at the end.
  const std::string l1 = Line(1), whole = LongLine(6000), spanning = LongLine(600000);
  const std::string l4 = Line(4), last = LongLine(5001);
  Write(l1 + "\n" + whole + "\n" + spanning + "\n" + l4 + "\n" + last);
  SourceConfig config = Config();
  config.file.max_line_bytes = 5000;
  FileSource source(0, config);
  RecordQueue queue(100);
  ASSERT_TRUE(source.Start({}, &queue).ok());
  ASSERT_TRUE(WaitFor([&] { return SourceStateName(source.Health().state) == "finished"; }));
  std::vector<SourceRecord> records;
  queue.PopBatchFor(100, milliseconds(0), &records);
  ASSERT_EQ(records.size(), 5u);
  EXPECT_EQ(PkOf(records[0]), "P#1");
  size_t offset = l1.size() + 1;
  struct Want {
    const std::string* line;
    int number;
    size_t line_end;
  };
  for (const Want& want : {Want{&whole, 2, 1}, Want{&spanning, 3, 1}, Want{&last, 5, 0}}) {
    const SourceRecord& r = records[want.number - 1];
    const std::string n = std::to_string(want.line->size());
    EXPECT_FALSE(r.event.has_value());
    EXPECT_EQ(r.reason, "record_too_large");
    EXPECT_EQ(r.locator, "line " + std::to_string(want.number));
    EXPECT_EQ(r.rejection.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(r.rejection.message(),
              "line " + std::to_string(want.number) + ": the line is " + n +
                  " bytes, longer than file.max_line_bytes (5000); only its first 4096 bytes "
                  "are kept. Is the file NDJSON, one stream record per line?");
    EXPECT_EQ(r.raw, want.line->substr(0, 4096));
    EXPECT_EQ(r.raw_bytes, want.line->size());
    offset += want.line->size() + want.line_end;
    EXPECT_EQ(r.next_position, Pos(offset, want.number + 1));
    if (want.number == 3) offset += l4.size() + 1;
  }
  EXPECT_EQ(PkOf(records[3]), "P#4");
  EXPECT_EQ(records[3].next_position, Pos(l1.size() + whole.size() + spanning.size() + l4.size() + 4, 5));
}

TEST_F(FileSourceTest, TheDefaultLimitIs16MiB) {
  const std::string at_limit = LongLine(16 << 20), over = LongLine((16 << 20) + 1);
  Write(at_limit + "\n" + over + "\n" + Line(3) + "\n");
  std::vector<SourceRecord> records = ReadAll();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].reason, "malformed_json");  // at the limit: read and decoded
  EXPECT_EQ(records[0].raw_bytes, 0u);
  EXPECT_EQ(records[1].reason, "record_too_large");
  EXPECT_EQ(records[1].raw_bytes, (16u << 20) + 1);
  EXPECT_EQ(records[1].rejection.message(),
            "line 2: the line is 16777217 bytes, longer than file.max_line_bytes (16777216); "
            "only its first 4096 bytes are kept. Is the file NDJSON, one stream record per "
            "line?");
  EXPECT_EQ(PkOf(records[2]), "P#3");
}

TEST_F(FileSourceTest, AnOversizedLinesHeadIsCutBeforeAUtf8Character) {
  // "é" is two bytes: the 4096th byte would split one.
  std::string line = "{" + std::string(4094, 'x');
  for (int i = 0; i < 3000; ++i) line += "é";
  Write(line + "\n");
  SourceConfig config = Config();
  config.file.max_line_bytes = 5000;
  FileSource source(0, config);
  RecordQueue queue(10);
  ASSERT_TRUE(source.Start({}, &queue).ok());
  std::vector<SourceRecord> records = Take(&queue, 1);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].raw, line.substr(0, 4095));
  EXPECT_EQ(records[0].raw_bytes, line.size());
}

TEST_F(FileSourceTest, DeadLetterOfAnOversizedRecordHoldsItsHeadAndSize) {
  FileSource source(0, Config());
  SourceRecord record;
  record.locator = "line 3";
  record.raw = "{\"eventName\":";
  record.raw_bytes = 20000000;
  ASSERT_TRUE(source.dead_letters()->Write(record, absl::InvalidArgumentError("line 3: big")).ok());
  EXPECT_EQ(ReadFile(dir_ + "/dead/sample.ndjson"),
            "{\"source\":\"sample\",\"locator\":\"line 3\",\"reason\":\"line 3: big\","
            "\"record\":\"{\\\"eventName\\\":\",\"record_bytes\":20000000}\n");
}

// A source following the file, with its metrics.
class FollowTest : public FileSourceTest {
 protected:
  void SetUp() override {
    FileSourceTest::SetUp();
    auto metrics = MetricsRegistry::Start("");
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = std::move(*metrics);
  }

  std::unique_ptr<FileSource> Follow() {
    return std::make_unique<FileSource>(0, Config(/*follow=*/true),
                                        std::make_unique<FileProbe>(*metrics_, "sample"));
  }

  // cdcview_source_file_reopened_total's two series: "<truncated> <rotated>".
  std::string Reopened() const {
    std::istringstream text(metrics_->Render());
    std::string truncated = "?", rotated = "?";
    for (std::string line; std::getline(text, line);) {
      const std::string family = "cdcview_source_file_reopened_total{";
      if (!line.starts_with(family)) continue;
      const std::string value = line.substr(line.rfind(' ') + 1);
      (line.find("reason=\"truncated\"") != std::string::npos ? truncated : rotated) = value;
    }
    return truncated + " " + rotated;
  }

  std::unique_ptr<MetricsRegistry> metrics_;
};

TEST_F(FollowTest, ATruncatedFileIsReadAgainFromItsStart) {
  const std::string l1 = Line(1), l2 = Line(2);
  Write(l1 + "\n" + l2 + "\n");
  auto source = Follow();
  RecordQueue queue(100);
  ASSERT_TRUE(source->Start({}, &queue).ok());
  std::vector<SourceRecord> first = Take(&queue, 2);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[1].next_position, Pos(l1.size() + l2.size() + 2, 3));
  ASSERT_TRUE(WaitFor([&] { return SourceStateName(source->Health().state) == "caught_up"; }));
  EXPECT_EQ(Reopened(), "0 0");

  const std::string l3 = Line(3);
  Write(l3 + "\n");  // truncates, then writes a shorter content: same inode
  std::vector<SourceRecord> after = Take(&queue, 1);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(PkOf(after[0]), "P#3");
  EXPECT_EQ(after[0].locator, "line 1");
  EXPECT_EQ(after[0].next_position, Pos(l3.size() + 1, 2, /*generation=*/1));
  EXPECT_EQ(Reopened(), "1 0");
  ASSERT_TRUE(WaitFor([&] { return SourceStateName(source->Health().state) == "caught_up"; }));
  source->Stop();
  EXPECT_EQ(queue.size(), 0u);

  // A restart resumes in the new generation.
  Write(Line(4) + "\n", std::ios::app);
  auto again = Follow();
  ASSERT_TRUE(again->Start({{"", after[0].next_position}}, &queue).ok());
  std::vector<SourceRecord> resumed = Take(&queue, 1);
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(PkOf(resumed[0]), "P#4");
  EXPECT_EQ(resumed[0].next_position, Pos(l3.size() + Line(4).size() + 2, 3, 1));
}

TEST_F(FollowTest, ARotatedFileIsReadToItsEndThenTheNewOneFromItsStart) {
  const std::string l1 = Line(1), l2 = Line(2), l3 = Line(3), l4 = Line(4);
  Write(l1 + "\n");
  auto source = Follow();
  RecordQueue queue(100);
  ASSERT_TRUE(source->Start({}, &queue).ok());
  ASSERT_EQ(Take(&queue, 1).size(), 1u);
  ASSERT_TRUE(WaitFor([&] { return SourceStateName(source->Health().state) == "caught_up"; }));

  // Renamed away with a line and an unterminated one still to read; a new file at the path.
  const std::string rotated = dir_ + "/stream.ndjson.1";
  const uint64_t old_inode = InodeOf(path_);
  Write(l2 + "\n" + l3, std::ios::app);
  std::filesystem::rename(path_, rotated);
  Write(l4 + "\n");
  ASSERT_NE(InodeOf(path_), old_inode);

  std::vector<SourceRecord> records = Take(&queue, 3);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(PkOf(records[0]), "P#2");
  EXPECT_EQ(records[0].next_position, PosIn(rotated, l1.size() + l2.size() + 2, 3));
  EXPECT_EQ(PkOf(records[1]), "P#3");  // complete: its file ended
  EXPECT_EQ(records[1].next_position, PosIn(rotated, l1.size() + l2.size() + l3.size() + 2, 4));
  EXPECT_EQ(PkOf(records[2]), "P#4");
  EXPECT_EQ(records[2].locator, "line 1");
  EXPECT_EQ(records[2].next_position, Pos(l4.size() + 1, 2, /*generation=*/1));
  EXPECT_EQ(Reopened(), "0 1");
  ASSERT_TRUE(WaitFor([&] { return SourceStateName(source->Health().state) == "caught_up"; }));
  EXPECT_EQ(queue.size(), 0u);
}

TEST_F(FollowTest, ARestartFindsTheRotatedFileBesideThePathAndReadsItsRestFirst) {
  const std::string l1 = Line(1), l2 = Line(2), l3 = Line(3);
  Write(l1 + "\n" + l2 + "\n");
  const std::string stored = Pos(l1.size() + 1, 2);  // l1 applied, l2 not
  const std::string rotated = dir_ + "/stream.ndjson.1";
  std::filesystem::rename(path_, rotated);
  Write(l3 + "\n");
  auto source = Follow();
  RecordQueue queue(100);
  ASSERT_TRUE(source->Start({{"", stored}}, &queue).ok());
  std::vector<SourceRecord> records = Take(&queue, 2);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(PkOf(records[0]), "P#2");
  EXPECT_EQ(records[0].next_position, PosIn(rotated, l1.size() + l2.size() + 2, 3));
  EXPECT_EQ(PkOf(records[1]), "P#3");
  EXPECT_EQ(records[1].next_position, Pos(l3.size() + 1, 2, 1));
  EXPECT_EQ(Reopened(), "0 1");
}

TEST_F(FollowTest, ARestartWithoutTheRotatedFileReadsThePathFromItsStart) {
  const std::string l1 = Line(1), l2 = Line(2);
  Write(l1 + "\n");
  const std::string stored = Pos(l1.size() + 1, 2);
  std::filesystem::rename(path_, dir_ + "/elsewhere");
  Write(l2 + "\n");  // created while the old file still exists: another inode
  std::filesystem::remove(dir_ + "/elsewhere");
  auto source = Follow();
  RecordQueue queue(100);
  ASSERT_TRUE(source->Start({{"", stored}}, &queue).ok());
  std::vector<SourceRecord> records = Take(&queue, 1);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(PkOf(records[0]), "P#2");
  EXPECT_EQ(records[0].next_position, Pos(l2.size() + 1, 2, 1));
  EXPECT_EQ(Reopened(), "0 1");
}

TEST_F(FollowTest, ARestartAfterATruncationReadsFromTheStart) {
  const std::string l1 = Line(1), l2 = Line(2);
  Write(l1 + "\n" + l2 + "\n");
  const std::string stored = Pos(l1.size() + l2.size() + 2, 3);
  Write(Line(3) + "\n");
  auto source = Follow();
  RecordQueue queue(100);
  ASSERT_TRUE(source->Start({{"", stored}}, &queue).ok());
  std::vector<SourceRecord> records = Take(&queue, 1);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(PkOf(records[0]), "P#3");
  EXPECT_EQ(records[0].next_position, Pos(Line(3).size() + 1, 2, 1));
  EXPECT_EQ(Reopened(), "1 0");
}

TEST_F(FileSourceTest, WithoutFollowAReplacedFileIsAnError) {
  const std::string l1 = Line(1);
  Write(l1 + "\n" + Line(2) + "\n");
  const std::string stored = Pos(l1.size() + 1, 2);
  std::filesystem::rename(path_, dir_ + "/old");
  Write(l1 + "\n" + Line(2) + "\n");
  FileSource source(0, Config());
  RecordQueue queue(10);
  absl::Status status = source.Start({{"", stored}}, &queue);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), "\"" + path_ + "\" (inode " + std::to_string(InodeOf(path_)) +
                                  ") is not the file stored position \"" + stored +
                                  "\" was read from: it was replaced; restore it, set follow: "
                                  "true to read the new file from its start, or start a new "
                                  "store");
  EXPECT_EQ(SourceStateName(source.Health().state), "error");
  EXPECT_EQ(queue.size(), 0u);
}

}  // namespace
}  // namespace cdcview
