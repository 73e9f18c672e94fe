// How steady this machine's CPU is: the same small unit of work, timed many times on one
// thread, back to back, again with an idle pause before each unit (as a writer that keeps up
// with its sources sleeps between batches), and again with the pause spent spinning. On
// dedicated hardware the three agree and the tail stays close to the median. On a shared VM
// the unit after a pause can take several times as long; if it does after spinning too, the
// cause is not the vCPU's idle state (which a busy-polling writer would avoid) but what runs
// on the host meanwhile and evicts the unit's data from the caches.
// tests/bench/kafka_bench.py runs it on cdcviewd's core before the lag phase.
//
//   cpu_jitter_bench [--seconds 4] [--unit-us 250] [--pause-us 3000] [--working-set-kib 1024]
// Prints three lines, "cpu jitter: back to back: ...", "cpu jitter: after <n> us idle: ..." and
// "cpu jitter: after <n> us spinning: ...", each with the unit's thread CPU time
// p50/p99/p99.9/max in ms (thread CPU time: the host's steal is left out where the kernel
// accounts it, so what remains is the vCPU running slowly).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"

namespace {

volatile uint64_t g_sink;  // the work's result goes somewhere, so it is not optimized away

double NowMs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

// Random reads over `data`: the work unit.
uint64_t Work(const std::vector<uint64_t>& data, uint64_t iterations, uint64_t* state) {
  uint64_t sum = 0, x = *state;
  for (uint64_t i = 0; i < iterations; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    sum += data[(x >> 33) % data.size()];
  }
  *state = x;
  return sum;
}

struct Series {
  std::vector<double> cpu_ms;

  std::string Summary() {
    if (cpu_ms.empty()) return "no units";
    std::sort(cpu_ms.begin(), cpu_ms.end());
    auto at = [&](double q) { return cpu_ms[std::min(cpu_ms.size() - 1, size_t(q * cpu_ms.size()))]; };
    char out[200];
    snprintf(out, sizeof out, "%zu units, CPU ms p50 %.3f p99 %.3f p99.9 %.3f max %.3f (p99/p50 %.1f)",
             cpu_ms.size(), at(0.5), at(0.99), at(0.999), cpu_ms.back(), at(0.99) / at(0.5));
    return out;
  }
};

enum class Pause { kNone, kSleep, kSpin };

Series Run(const std::vector<uint64_t>& data, uint64_t iterations, double seconds, Pause pause,
           int pause_us, uint64_t* state, uint64_t* sink) {
  Series series;
  const double end = NowMs(CLOCK_MONOTONIC) + seconds * 1e3;
  while (NowMs(CLOCK_MONOTONIC) < end) {
    if (pause == Pause::kSleep) {
      std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
    } else if (pause == Pause::kSpin) {
      const double until = NowMs(CLOCK_MONOTONIC) + pause_us / 1e3;
      while (NowMs(CLOCK_MONOTONIC) < until) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
    }
    const double start = NowMs(CLOCK_THREAD_CPUTIME_ID);
    *sink += Work(data, iterations, state);
    series.cpu_ms.push_back(NowMs(CLOCK_THREAD_CPUTIME_ID) - start);
  }
  return series;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cpu_jitter_bench: the same unit of CPU work timed back to back and after idling"};
  double seconds = 4;
  int unit_us = 250, pause_us = 3000;
  size_t working_set_kib = 1024;
  app.add_option("--seconds", seconds, "how long each of the three series runs")->check(CLI::PositiveNumber);
  app.add_option("--unit-us", unit_us, "the unit's CPU time, calibrated back to back")->check(CLI::PositiveNumber);
  app.add_option("--pause-us", pause_us, "the pause before each unit of the second (idle) and third (spinning) series")
      ->check(CLI::PositiveNumber);
  app.add_option("--working-set-kib", working_set_kib, "memory the unit reads at random")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::vector<uint64_t> data(working_set_kib * 1024 / sizeof(uint64_t));
  for (size_t i = 0; i < data.size(); ++i) data[i] = i * 2654435761ULL;
  uint64_t state = 1, sink = 0;
  // Calibration: the median of a few back-to-back trials, so one slow trial does not set it.
  const uint64_t trial = 100000;
  std::vector<double> trials;
  for (int i = 0; i < 9; ++i) {
    const double start = NowMs(CLOCK_THREAD_CPUTIME_ID);
    sink += Work(data, trial, &state);
    trials.push_back(NowMs(CLOCK_THREAD_CPUTIME_ID) - start);
  }
  std::nth_element(trials.begin(), trials.begin() + 4, trials.end());
  const uint64_t iterations = std::max<uint64_t>(1, uint64_t(trial * (unit_us / 1e3) / trials[4]));

  Series back_to_back = Run(data, iterations, seconds, Pause::kNone, 0, &state, &sink);
  Series after_idle = Run(data, iterations, seconds, Pause::kSleep, pause_us, &state, &sink);
  Series after_spin = Run(data, iterations, seconds, Pause::kSpin, pause_us, &state, &sink);
  printf("cpu jitter: back to back: %s\n", back_to_back.Summary().c_str());
  printf("cpu jitter: after %d us idle: %s\n", pause_us, after_idle.Summary().c_str());
  printf("cpu jitter: after %d us spinning: %s\n", pause_us, after_spin.Summary().c_str());
  g_sink = sink;
  return 0;
}
