// CallStats' cold half: reading the cells back and the summary table (see call_stats.hpp).
#include "core/call_stats.hpp"

#include "base/errors.hpp"

namespace collie::core {

std::vector<CallStats::Row> CallStats::rows(double nsPerTick) const {
  std::vector<Row> out;
  for (int c = 0; c < kCollectives; ++c) {
    for (int a = 0; a < algorithms::kNumAlgorithms; ++a) {
      const Cell& cell = cells_[c][a];
      const uint64_t calls = cell.calls.load(std::memory_order_relaxed);
      if (calls == 0) continue;
      const double seconds =
          timed_ ? static_cast<double>(cell.ticks.load(std::memory_order_relaxed)) * nsPerTick * 1e-9 : -1.0;
      out.push_back(Row{static_cast<algorithms::Collective>(c), algorithms::kAllAlgorithms[a], calls,
                        cell.bytes.load(std::memory_order_relaxed), seconds});
    }
  }
  return out;
}

namespace {

std::string humanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? base::format("%.0f B", b) : base::format("%.1f %s", b, units[u]);
}

}  // namespace

std::string CallStats::summary(const std::vector<Row>& rows, bool timed) {
  std::string out = base::format("%-14s %-7s %10s %12s %12s %10s %10s", "collective", "algo", "calls", "bytes",
                                 "bytes/call", timed ? "time ms" : "time", timed ? "us/call" : "");
  uint64_t calls = 0, bytes = 0;
  double seconds = 0;
  for (const Row& r : rows) {
    calls += r.calls;
    bytes += r.bytes;
    seconds += timed ? r.seconds : 0;
    const double perCall = static_cast<double>(r.bytes) / static_cast<double>(r.calls);
    out += base::format("\n%-14s %-7s %10llu %12s %12s", algorithms::collectiveName(r.coll),
                        algorithms::algorithmName(r.algo), static_cast<unsigned long long>(r.calls),
                        humanBytes(static_cast<double>(r.bytes)).c_str(), humanBytes(perCall).c_str());
    if (timed) out += base::format(" %10.3f %10.2f", r.seconds * 1e3, r.seconds * 1e6 / static_cast<double>(r.calls));
  }
  out += base::format("\n%-14s %-7s %10llu %12s %12s", "total", "", static_cast<unsigned long long>(calls),
                      humanBytes(static_cast<double>(bytes)).c_str(), "");
  if (timed) out += base::format(" %10.3f", seconds * 1e3);
  if (!timed) out += "\n(times not kept: set COLLIE_STATS=1, COLLIE_TRACE or COLLIE_FLIGHT_RECORDER to time calls)";
  return out;
}

}  // namespace collie::core
