#include "daemon/sources/record_queue.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cdcview {
namespace {

using std::chrono::milliseconds;

SourceRecord Rec(int n) {
  SourceRecord r;
  r.next_position = std::to_string(n);
  return r;
}

std::vector<std::string> Positions(const std::vector<SourceRecord>& records) {
  std::vector<std::string> out;
  for (const SourceRecord& r : records) out.push_back(r.next_position);
  return out;
}

TEST(RecordQueueTest, PopsInOrderUpToMax) {
  RecordQueue q(10);
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(q.Push(Rec(i)));
  EXPECT_EQ(q.size(), 3u);
  std::vector<SourceRecord> batch;
  ASSERT_TRUE(q.PopBatch(2, milliseconds(0), &batch));
  EXPECT_EQ(Positions(batch), (std::vector<std::string>{"1", "2"}));
  batch.clear();
  ASSERT_TRUE(q.PopBatch(5, milliseconds(0), &batch));
  EXPECT_EQ(Positions(batch), (std::vector<std::string>{"3"}));
  EXPECT_EQ(q.size(), 0u);
}

int64_t UnixMillisNow() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(RecordQueueTest, EveryPushStampsTheReceiveTimeUnlessTheSourceDid) {
  RecordQueue q(10);
  SourceRecord stamped = Rec(4);
  stamped.received_ms = 1234;  // a source that knows when it read the record
  const int64_t before = UnixMillisNow();
  ASSERT_TRUE(q.Push(Rec(1)));
  SourceRecord second = Rec(2);
  ASSERT_EQ(q.PushFor(&second, milliseconds(0)), RecordQueue::PushResult::kPushed);
  ASSERT_TRUE(q.TryPush(Rec(3)));
  ASSERT_TRUE(q.PushUnless(std::move(stamped), [] { return false; }));
  const int64_t after = UnixMillisNow();
  std::vector<SourceRecord> batch;
  ASSERT_TRUE(q.PopBatch(10, milliseconds(0), &batch));
  ASSERT_EQ(Positions(batch), (std::vector<std::string>{"1", "2", "3", "4"}));
  for (int i = 0; i < 3; ++i) {
    EXPECT_GE(batch[i].received_ms, before) << i;
    EXPECT_LE(batch[i].received_ms, after) << i;
  }
  EXPECT_EQ(batch[3].received_ms, 1234);
}

TEST(RecordQueueTest, TheReceiveTimeIsTakenBeforeWaitingForRoom) {
  RecordQueue q(1);
  ASSERT_TRUE(q.Push(Rec(1)));
  SourceRecord waiting = Rec(2);
  ASSERT_EQ(q.PushFor(&waiting, milliseconds(20)), RecordQueue::PushResult::kFull);
  const int64_t first_try = waiting.received_ms;  // set although nothing was pushed
  ASSERT_GT(first_try, 0);
  std::this_thread::sleep_for(milliseconds(30));
  std::vector<SourceRecord> batch;
  ASSERT_TRUE(q.PopBatch(1, milliseconds(0), &batch));
  ASSERT_EQ(q.PushFor(&waiting, milliseconds(20)), RecordQueue::PushResult::kPushed);
  batch.clear();
  ASSERT_TRUE(q.PopBatch(1, milliseconds(0), &batch));
  ASSERT_EQ(Positions(batch), (std::vector<std::string>{"2"}));
  EXPECT_EQ(batch[0].received_ms, first_try);  // the wait is cdcviewd's, not the source's
  EXPECT_LE(first_try + 50, UnixMillisNow());  // 20 + 30 ms of waiting since
}

TEST(RecordQueueTest, PushBlocksWhileFullUntilAPop) {
  RecordQueue q(2);
  ASSERT_TRUE(q.Push(Rec(1)));
  ASSERT_TRUE(q.Push(Rec(2)));
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    EXPECT_TRUE(q.Push(Rec(3)));
    pushed = true;
  });
  // A correct queue can never let the third push through here, however long we wait.
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(pushed.load());
  EXPECT_EQ(q.size(), 2u);

  std::vector<SourceRecord> batch;
  q.PopBatchFor(1, milliseconds(0), &batch);
  EXPECT_EQ(Positions(batch), (std::vector<std::string>{"1"}));
  producer.join();  // returns only because the pop made room
  EXPECT_TRUE(pushed.load());
  batch.clear();
  q.PopBatchFor(10, milliseconds(0), &batch);
  EXPECT_EQ(Positions(batch), (std::vector<std::string>{"2", "3"}));
}

TEST(RecordQueueTest, CloseWakesABlockedPush) {
  RecordQueue q(1);
  ASSERT_TRUE(q.Push(Rec(1)));
  std::atomic<int> result{-1};
  std::thread producer([&] { result = q.Push(Rec(2)) ? 1 : 0; });
  q.Close();
  producer.join();
  EXPECT_EQ(result.load(), 0);  // dropped: the queue was closed
  EXPECT_FALSE(q.Push(Rec(3)));
}

TEST(RecordQueueTest, CloseWakesABlockedPopAndDrainsFirst) {
  RecordQueue q(4);
  std::atomic<int> result{-1};
  std::thread consumer([&] {
    std::vector<SourceRecord> batch;
    result = q.PopBatch(10, milliseconds(0), &batch) ? 1 : 0;
  });
  q.Close();
  consumer.join();
  EXPECT_EQ(result.load(), 0);  // closed and empty

  RecordQueue drained(4);
  ASSERT_TRUE(drained.Push(Rec(1)));
  drained.Close();
  std::vector<SourceRecord> batch;
  EXPECT_TRUE(drained.PopBatch(10, milliseconds(1000), &batch));
  EXPECT_EQ(Positions(batch), (std::vector<std::string>{"1"}));
  EXPECT_FALSE(drained.PopBatch(10, milliseconds(0), &batch));
}

TEST(RecordQueueTest, PopBatchLingersForAFullerBatch) {
  RecordQueue q(10);
  ASSERT_TRUE(q.Push(Rec(1)));
  std::thread producer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    q.Push(Rec(2));
  });
  std::vector<SourceRecord> batch;
  // Returns as soon as the batch is full (2), long before the linger ends.
  ASSERT_TRUE(q.PopBatch(2, milliseconds(60000), &batch));
  producer.join();
  EXPECT_EQ(Positions(batch), (std::vector<std::string>{"1", "2"}));
}

TEST(RecordQueueTest, PopBatchTakesABacklogUpToBacklogMax) {
  RecordQueue q(20);
  for (int i = 1; i <= 10; ++i) ASSERT_TRUE(q.Push(Rec(i)));
  std::vector<SourceRecord> batch;
  // 10 waiting, more than max (3): the batch takes up to backlog_max (8).
  ASSERT_TRUE(q.PopBatch(3, milliseconds(0), &batch, 8));
  EXPECT_EQ(Positions(batch), (std::vector<std::string>{"1", "2", "3", "4", "5", "6", "7", "8"}));
  // 2 waiting, more than max (1), but no backlog_max given: max holds.
  batch.clear();
  ASSERT_TRUE(q.PopBatch(1, milliseconds(0), &batch));
  EXPECT_EQ(Positions(batch), (std::vector<std::string>{"9"}));
  // 2 waiting, exactly max: no backlog.
  ASSERT_TRUE(q.Push(Rec(11)));
  batch.clear();
  ASSERT_TRUE(q.PopBatch(2, milliseconds(0), &batch, 8));
  EXPECT_EQ(Positions(batch), (std::vector<std::string>{"10", "11"}));
}

// A lingering batch larger than the queue: the consumer is woken each time the queue is full,
// so the producer never waits on it and the batch fills long before the linger ends.
TEST(RecordQueueTest, LingeringBatchLargerThanTheQueueFills) {
  RecordQueue q(2);
  ASSERT_TRUE(q.Push(Rec(1)));
  std::thread producer([&] {
    for (int i = 2; i <= 7; ++i) q.Push(Rec(i));
  });
  std::vector<SourceRecord> batch;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(q.PopBatch(7, milliseconds(60000), &batch));
  producer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(30000));
  EXPECT_EQ(Positions(batch), (std::vector<std::string>{"1", "2", "3", "4", "5", "6", "7"}));
}

TEST(RecordQueueTest, PushForGivesUpWhileFullAndKeepsTheRecord) {
  RecordQueue q(1);
  SourceRecord first = Rec(1);
  EXPECT_EQ(q.PushFor(&first, milliseconds(0)), RecordQueue::PushResult::kPushed);
  SourceRecord second = Rec(2);
  EXPECT_EQ(q.PushFor(&second, milliseconds(1)), RecordQueue::PushResult::kFull);
  EXPECT_EQ(second.next_position, "2");  // not moved from
  EXPECT_EQ(q.size(), 1u);
  q.Close();
  EXPECT_EQ(q.PushFor(&second, milliseconds(1)), RecordQueue::PushResult::kClosed);
  EXPECT_EQ(second.next_position, "2");
}

TEST(RecordQueueTest, PushWithinGivesUpAfterItsLimitOrWhenStopping) {
  RecordQueue q(1);
  ASSERT_TRUE(q.Push(Rec(1)));
  SourceRecord r = Rec(2);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(q.PushWithin(&r, milliseconds(250), [] { return false; }),
            RecordQueue::PushResult::kFull);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(250));
  EXPECT_EQ(r.next_position, "2");  // kept for the caller
  EXPECT_EQ(q.PushWithin(&r, milliseconds(60000), [] { return true; }),
            RecordQueue::PushResult::kClosed);  // stopping: after one 100 ms slice
  std::vector<SourceRecord> batch;
  ASSERT_TRUE(q.PopBatch(1, milliseconds(0), &batch));
  EXPECT_EQ(q.PushWithin(&r, milliseconds(250), [] { return false; }),
            RecordQueue::PushResult::kPushed);
  batch.clear();
  ASSERT_TRUE(q.PopBatch(1, milliseconds(0), &batch));
  EXPECT_EQ(Positions(batch), std::vector<std::string>{"2"});
}

TEST(RecordQueueTest, PopBatchForReturnsEmptyAfterWaiting) {
  RecordQueue q(2);
  std::vector<SourceRecord> batch;
  q.PopBatchFor(5, milliseconds(1), &batch);
  EXPECT_TRUE(batch.empty());
}

}  // namespace
}  // namespace cdcview
