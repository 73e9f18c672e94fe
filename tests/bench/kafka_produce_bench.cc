// A paced librdkafka producer for kafka_bench.py's lag phase: pre-encoded records at a fixed
// rate on an absolute schedule, so the load is what was asked for and the producer costs
// little CPU (the Python producer it replaces took 12 CPU-seconds per 20 s at 21k events/s,
// a quarter of this 2-core machine, and starved the daemon it was measuring).
//
//   kafka_produce_bench --brokers 127.0.0.1:9092 --topic t --input records.bin --rate 20000
//                       [--seconds 20] [--linger-ms 2] [--tick-us 1000]
//
// Input: records one after another, each <u32 partition><u32 key length><key><u32 value
// length><value>, little-endian (kafka_bench.py writes it). Record i is due at start + i/rate:
// a late tick produces everything due at once instead of drifting. Each tick wakes at an
// absolute time and produces the records due by then; their Kafka timestamps (CreateTime) are
// set by librdkafka at the produce call, so linger (time spent in the producer's queue) counts
// inside the lag measured from them.
//
// Prints a progress line every 5 s and finally "produce: <n> messages in <s> s = <rate> msg/s,
// ..." with the producer's own CPU seconds, its worst lateness against the schedule and the
// linger it used.
#include <librdkafka/rdkafka.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "index_builders/coding.h"

namespace {

struct Record {
  int32_t partition;
  std::string key;
  std::string value;
};

std::atomic<int64_t> delivered{0};
std::atomic<int64_t> failed{0};

void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void*) {
  if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    delivered.fetch_add(1, std::memory_order_relaxed);
  } else {
    if (failed.fetch_add(1, std::memory_order_relaxed) < 5) {
      std::fprintf(stderr, "delivery failed: %s\n", rd_kafka_err2str(m->err));
    }
  }
}

bool ReadU32(std::ifstream& in, uint32_t* out) {
  char b[4];
  if (!in.read(b, 4)) return false;
  *out = cdcview::DecodeLittleEndian32(b);
  return true;
}

bool ReadRecords(const std::string& path, std::vector<Record>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  uint32_t partition = 0, size = 0;
  while (ReadU32(in, &partition)) {
    Record r;
    r.partition = static_cast<int32_t>(partition);
    if (!ReadU32(in, &size)) return false;
    r.key.resize(size);
    if (!in.read(r.key.data(), size)) return false;
    if (!ReadU32(in, &size)) return false;
    r.value.resize(size);
    if (!in.read(r.value.data(), size)) return false;
    out->push_back(std::move(r));
  }
  return in.eof();
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

void SleepUntilNs(int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);  // every thread: ours and librdkafka's
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

bool Set(rd_kafka_conf_t* conf, const char* name, const std::string& value) {
  char error[512];
  if (rd_kafka_conf_set(conf, name, value.c_str(), error, sizeof error) != RD_KAFKA_CONF_OK) {
    std::fprintf(stderr, "librdkafka property %s=%s: %s\n", name, value.c_str(), error);
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"paced librdkafka producer"};
  std::string brokers, topic, input;
  double rate = 0, seconds = 20, linger_ms = 2;
  int64_t tick_us = 1000;
  app.add_option("--brokers", brokers)->required();
  app.add_option("--topic", topic)->required();
  app.add_option("--input", input, "pre-encoded records (see the header comment)")->required();
  app.add_option("--rate", rate, "messages per second")->required()->check(CLI::PositiveNumber);
  app.add_option("--seconds", seconds, "stop producing after this long");
  app.add_option("--linger-ms", linger_ms,
                 "librdkafka linger.ms: fewer, larger produce requests for the broker, at most "
                 "this much added latency (inside the measured lag)");
  app.add_option("--tick-us", tick_us, "how often the producer wakes to produce what is due")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::vector<Record> records;
  if (!ReadRecords(input, &records)) {
    std::fprintf(stderr, "cannot read %s: expected <u32 partition><u32 n><key><u32 n><value>...\n",
                 input.c_str());
    return 1;
  }

  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char linger[32];
  std::snprintf(linger, sizeof linger, "%g", linger_ms);
  if (!Set(conf, "bootstrap.servers", brokers) || !Set(conf, "linger.ms", linger) ||
      !Set(conf, "acks", "all") || !Set(conf, "queue.buffering.max.messages", "1000000") ||
      !Set(conf, "client.id", "kafka_produce_bench")) {
    return 2;
  }
  rd_kafka_conf_set_dr_msg_cb(conf, OnDelivery);
  char error[512];
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, error, sizeof error);
  if (rk == nullptr) {
    std::fprintf(stderr, "cannot create a producer: %s\n", error);
    return 1;
  }
  // Connected and the topic's leaders known before the clock starts: the first messages wait
  // for neither.
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  const rd_kafka_metadata_t* metadata = nullptr;
  if (rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &metadata, 10000); err) {
    std::fprintf(stderr, "cannot read the metadata of %s: %s\n", topic.c_str(),
                 rd_kafka_err2str(err));
    return 1;
  }
  rd_kafka_metadata_destroy(metadata);

  const double cpu0 = CpuSeconds();
  const int64_t start = NowNs();
  const int64_t end = start + static_cast<int64_t>(seconds * 1e9);
  const double ns_per_message = 1e9 / rate;
  int64_t sent = 0, worst_late_ns = 0, next_report = start + 5000000000LL;
  const int64_t total = static_cast<int64_t>(records.size());
  while (sent < total) {
    const int64_t due = start + static_cast<int64_t>(static_cast<double>(sent) * ns_per_message);
    if (due >= end) break;
    int64_t now = NowNs();
    if (due > now) {
      SleepUntilNs(std::max(due, now + tick_us * 1000));
      now = NowNs();
    }
    worst_late_ns = std::max(worst_late_ns, now - due);
    // Everything due by now, in one go.
    const int64_t due_by_now = std::min<int64_t>(
        total, static_cast<int64_t>(static_cast<double>(now - start) / ns_per_message) + 1);
    for (; sent < due_by_now; ++sent) {
      Record& r = records[sent];
      while (rd_kafka_produce(rkt, r.partition, RD_KAFKA_MSG_F_COPY, r.value.data(),
                              r.value.size(), r.key.data(), r.key.size(), nullptr) != 0) {
        if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
          std::fprintf(stderr, "produce failed: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
          return 1;
        }
        rd_kafka_poll(rk, 10);
      }
    }
    rd_kafka_poll(rk, 0);  // delivery reports
    if (now >= next_report) {
      std::fprintf(stderr, "produce: %lld sent, %lld delivered after %.1f s\n",
                   static_cast<long long>(sent), static_cast<long long>(delivered.load()),
                   static_cast<double>(now - start) / 1e9);
      next_report += 5000000000LL;
    }
  }
  const double took = static_cast<double>(NowNs() - start) / 1e9;
  if (rd_kafka_flush(rk, 60000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    std::fprintf(stderr, "%d messages still unsent after 60 s\n", rd_kafka_outq_len(rk));
  }
  const double cpu = CpuSeconds() - cpu0;
  rd_kafka_topic_destroy(rkt);
  rd_kafka_destroy(rk);
  std::printf(
      "produce: %lld messages in %.2f s = %.0f msg/s, %lld delivered, %lld failed; producer CPU "
      "%.2f s; latest %.2f ms behind schedule; linger.ms %s\n",
      static_cast<long long>(sent), took, static_cast<double>(sent) / took,
      static_cast<long long>(delivered.load()), static_cast<long long>(failed.load()), cpu,
      static_cast<double>(worst_late_ns) / 1e6, linger);
  if (sent == total && static_cast<double>(total) < rate * seconds) {
    std::fprintf(stderr, "the input ran out: %lld records for %.0f/s over %.1f s\n",
                 static_cast<long long>(total), rate, seconds);
  }
  return failed.load() == 0 && delivered.load() == sent ? 0 : 1;
}
