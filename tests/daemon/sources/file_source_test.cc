#include "daemon/sources/file_source.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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

std::string Pos(size_t offset, int line) {
  return std::to_string(offset) + ":" + std::to_string(line);
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
              "number>\"");
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
  EXPECT_EQ(records.back().next_position, Pos(text.size(), static_cast<int>(lines) + 1));
}

}  // namespace
}  // namespace cdcview
