// The raw consume rate of a bare librdkafka loop: every message of a topic, from the start,
// no decoding, no group. tests/bench/kafka_bench.py sets it beside cdcviewd's rate over the
// same topic in the same run.
//
//   kafka_consume_bench --brokers 127.0.0.1:9092 --topic orders [--partitions 6]
// Prints: "raw consume: <n> messages, <bytes> bytes in <s> s = <rate> msg/s".
//
//   kafka_consume_bench --brokers ... --topic live --follow 20
// Reads only what is produced over the next 20 s and prints the Kafka part of the replication
// lag, receive time - message timestamp: "kafka lag: <n> messages, p50 <ms> ms, p99 <ms> ms,
// max <ms> ms" (the producer's linger, the broker, the fetch; without cdcviewd's own part).
// --property name=value sets a librdkafka property (kafka_bench gives the follower the fetch
// settings of cdcviewd's live source).
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"

int main(int argc, char** argv) {
  CLI::App app{"bare librdkafka consume loop"};
  std::string brokers, topic;
  int partitions = 6;
  app.add_option("--brokers", brokers)->required();
  app.add_option("--topic", topic)->required();
  app.add_option("--partitions", partitions);
  double follow = 0;
  app.add_option("--follow", follow, "seconds: read only new messages, print their Kafka lag");
  std::vector<std::string> properties;
  app.add_option("--property", properties,
                 "name=value: a librdkafka consumer property (e.g. fetch.wait.max.ms=5), repeatable");
  CLI11_PARSE(app, argc, argv);

  char error[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers.c_str(), error, sizeof error);
  rd_kafka_conf_set(conf, "group.id", "kafka_consume_bench", error, sizeof error);
  rd_kafka_conf_set(conf, "enable.auto.commit", "false", error, sizeof error);
  for (const std::string& property : properties) {
    const size_t eq = property.find('=');
    if (eq == std::string::npos ||
        rd_kafka_conf_set(conf, property.substr(0, eq).c_str(), property.substr(eq + 1).c_str(),
                          error, sizeof error) != RD_KAFKA_CONF_OK) {
      std::fprintf(stderr, "--property %s: %s\n", property.c_str(),
                   eq == std::string::npos ? "expected name=value" : error);
      return 1;
    }
  }
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, error, sizeof error);
  if (rk == nullptr) {
    std::fprintf(stderr, "cannot create a consumer: %s\n", error);
    return 1;
  }
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(partitions);
  int64_t want = 0;
  for (int p = 0; p < partitions; ++p) {
    int64_t low = 0, high = 0;
    // A topic created a moment ago may have no leader yet: ask again for up to 10 s.
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    for (int attempt = 0; attempt < 20; ++attempt) {
      err = rd_kafka_query_watermark_offsets(rk, topic.c_str(), p, &low, &high, 10000);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      std::fprintf(stderr, "cannot read the watermarks of %s/%d: %s; is the topic there?\n",
                   topic.c_str(), p, rd_kafka_err2str(err));
      return 1;
    }
    want += high - low;
    rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  if (follow > 0) {
    for (int i = 0; i < list->cnt; ++i) list->elems[i].offset = RD_KAFKA_OFFSET_END;
  }
  rd_kafka_assign(rk, list);
  rd_kafka_topic_partition_list_destroy(list);

  if (follow > 0) {
    std::vector<int64_t> lags_ms;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(follow);
    while (std::chrono::steady_clock::now() < end) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
      if (m == nullptr) continue;
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
        lags_ms.push_back(now - rd_kafka_message_timestamp(m, nullptr));
      }
      rd_kafka_message_destroy(m);
    }
    std::sort(lags_ms.begin(), lags_ms.end());
    auto at = [&](double q) {
      return lags_ms.empty() ? -1 : static_cast<long long>(lags_ms[static_cast<size_t>(
                                        q * static_cast<double>(lags_ms.size() - 1))]);
    };
    std::printf("kafka lag: %zu messages, p50 %lld ms, p99 %lld ms, max %lld ms\n",
                lags_ms.size(), at(0.5), at(0.99), at(1.0));
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return 0;
  }

  int64_t got = 0, bytes = 0;
  auto start = std::chrono::steady_clock::time_point{};
  while (got < want) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 1000);
    if (m == nullptr) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (got == 0) start = std::chrono::steady_clock::now();  // from the first message
      ++got;
      bytes += static_cast<int64_t>(m->len);
    }
    rd_kafka_message_destroy(m);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("raw consume: %lld messages, %lld bytes in %.2f s = %.0f msg/s\n",
              static_cast<long long>(got), static_cast<long long>(bytes), seconds,
              seconds > 0 ? static_cast<double>(got) / seconds : 0.0);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return 0;
}
