// CallTrace: buffering events and writing them as Chrome trace JSON (see call_trace.hpp).
#include "core/call_trace.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

#include "base/datatypes.hpp"
#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"
#include "core/flight_recorder.hpp"

namespace collie::core {

namespace {

constexpr size_t kFlushEvery = 4096;
constexpr uint64_t kCallsTid = 0;
constexpr uint64_t kDdpTid = 1000000;  // + the bucket
uint64_t waitTid(int peer, bool recv) { return 1 + 2 * static_cast<uint64_t>(peer) + (recv ? 0 : 1); }

}  // namespace

std::string jsonEscaped(const std::string& s) {
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += base::format("\\u%04x", c);
    } else {
      out += ch;
    }
  }
  return out;
}

std::string transportsNamed(uint32_t mask, const std::vector<std::string>& names) {
  std::string out;
  for (size_t t = 0; t < names.size() && t < 32; ++t)
    if (mask & (1u << t)) out += (out.empty() ? "" : "+") + names[t];
  return out.empty() ? "self" : out;
}

std::string CallTrace::pathFor(const std::string& prefix, const std::string& commName, int rank, int instance) {
  const std::string suffix = instance > 0 ? base::format(".%d", instance) : std::string();
  if (commName == "comm") return base::format("%s.rank%d%s.trace.json", prefix.c_str(), rank, suffix.c_str());
  return base::format("%s.%s.rank%d%s.trace.json", prefix.c_str(), commName.c_str(), rank, suffix.c_str());
}

std::unique_ptr<CallTrace> CallTrace::open(int rank, int nranks, const std::string& commName, const TickClock& clock,
                                           std::vector<std::string> transportNames) {
  const std::string& prefix = base::params::trace();
  if (prefix.empty()) return nullptr;
  // Opened exclusively: another live communicator of this name and rank in this process (torch's process groups
  // are all "torch"), or one recreated after a destroy, takes the next free instance instead of replacing a file.
  std::string path;
  FILE* f = nullptr;
  for (int instance = 0; instance < 1000 && !f; ++instance) {
    path = pathFor(prefix, commName, rank, instance);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      break;
    }
    f = ::fdopen(fd, "w");
    if (!f) ::close(fd);
  }
  if (!f) {
    COLLIE_WARN(base::kLogColl, "%s rank %d: cannot write the trace to %s (COLLIE_TRACE): %s; running without it",
                commName.c_str(), rank, path.c_str(), base::errnoString(errno).c_str());
    return nullptr;
  }
  return std::unique_ptr<CallTrace>(new CallTrace(rank, nranks, commName, clock, path, f, std::move(transportNames)));
}

CallTrace::CallTrace(int rank, int nranks, std::string commName, const TickClock& clock, std::string path, FILE* file,
                     std::vector<std::string> transportNames)
    : rank_(rank),
      nranks_(nranks),
      name_(std::move(commName)),
      clock_(clock),
      path_(std::move(path)),
      transportNames_(std::move(transportNames)),
      file_(file),
      lastEnd_(2 * static_cast<size_t>(nranks) + 2, 0) {
  events_.reserve(kFlushEvery);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  // The first two events: which rank this is, and the clock its ts count from (see call_trace.hpp).
  std::fprintf(
      file_,
      "[\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": \"rank %d\", "
      "\"comm\": \"%s\", \"rank\": %d, \"nranks\": %d, \"host\": \"%s\", \"os_pid\": %d, \"base_us\": %lld, "
      "\"clock\": \"CLOCK_REALTIME\", \"format\": \"collie-trace/1\"}},\n"
      "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"sort_index\": %d}}",
      rank_, rank_, jsonEscaped(name_).c_str(), rank_, nranks_, jsonEscaped(host).c_str(), static_cast<int>(getpid()),
      static_cast<long long>(clock_.originWallUs()), rank_, rank_);
  std::fflush(file_);
}

CallTrace::~CallTrace() {
  std::lock_guard<std::mutex> lock(mu_);
  writeLocked();
  std::fputs("\n]\n", file_);
  if (std::fclose(file_) != 0)
    COLLIE_WARN(base::kLogColl, "%s rank %d: the trace %s was not written whole: %s", name_.c_str(), rank_,
                path_.c_str(), base::errnoString(errno).c_str());
  else
    COLLIE_INFO(base::kLogColl, "%s rank %d: trace written to %s", name_.c_str(), rank_, path_.c_str());
}

void CallTrace::callBegin(const OpDesc& op, algorithms::Algorithm algo, uint32_t transports, size_t bytes, uint64_t seq,
                          uint64_t startTicks) {
  Event e{};
  e.kind = Kind::Call;
  e.coll = op.coll;
  e.type = op.type;
  e.op = op.op;
  e.algo = algo;
  e.peerOrRoot = op.root;
  e.transports = transports;
  e.seq = seq;
  e.count = op.count;
  e.bytes = bytes;
  e.start = startTicks;
  open_.push_back(e);
  ++calls_;
}

void CallTrace::callsEnd(bool ok, uint64_t endTicks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Event& e : open_) {
    if (e.kind == Kind::Call) {
      e.flag = ok;
      e.end = endTicks;
    }
    push(e);
  }
  open_.clear();
  calls_ = 0;
}

void CallTrace::stepWait(size_t job, size_t step, int peer, bool recv, size_t bytes, uint64_t start, uint64_t end) {
  Event e{};
  e.kind = Kind::Wait;
  e.flag = recv;
  e.peerOrRoot = peer;
  e.count = step;
  e.bytes = bytes;
  if (job < calls_) {  // the batch's jobs are its calls, in order, first in open_
    e.seq = open_[job].seq;
    e.coll = open_[job].coll;
  }
  uint64_t& last = lastEnd_[std::min(lastEnd_.size() - 1, static_cast<size_t>(waitTid(peer, recv)))];
  e.start = std::max(start, last);  // transfers with one peer complete in order: this step's share starts here
  e.end = std::max(end, e.start);
  last = e.end;
  open_.push_back(e);  // written with its call, under one lock
}

void CallTrace::ddpSpan(const char* name, size_t bucket, size_t bytes, uint64_t start, uint64_t end) {
  Event e{};
  e.kind = Kind::Ddp;
  e.name = name;
  e.seq = bucket;
  e.bytes = bytes;
  e.start = start;
  e.end = std::max(start, end);
  std::lock_guard<std::mutex> lock(mu_);
  push(e);
}

void CallTrace::push(const Event& e) {
  events_.push_back(e);
  if (events_.size() >= kFlushEvery) writeLocked();
}

void CallTrace::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  writeLocked();
}

bool CallTrace::tryFlush() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  writeLocked();
  return true;
}

void CallTrace::nameThread(uint64_t tid, std::string* out) {
  if (std::find(named_.begin(), named_.end(), tid) != named_.end()) return;
  named_.push_back(tid);
  std::string name;
  if (tid == kCallsTid) {
    name = "calls";
  } else if (tid >= kDdpTid) {
    name = base::format("ddp bucket %llu", static_cast<unsigned long long>(tid - kDdpTid));
  } else {
    const auto peer = static_cast<int>((tid - 1) / 2);
    name = (tid - 1) % 2 == 0 ? base::format("recv from rank %d", peer) : base::format("send to rank %d", peer);
  }
  *out += base::format(
      ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%llu,\"args\":{\"name\":\"%s\"}}"
      ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%llu,\"args\":{\"sort_index\":"
      "%llu}}",
      rank_, static_cast<unsigned long long>(tid), name.c_str(), rank_, static_cast<unsigned long long>(tid),
      static_cast<unsigned long long>(tid));
}

// The events are appended field by field with std::to_chars: vsnprintf per event cost about 1 us, most of the
// trace's cost per call.
namespace {

struct Out {
  std::string& s;
  template <size_t N>
  Out& operator<<(const char (&literal)[N]) {
    s.append(literal, N - 1);
    return *this;
  }
  Out& operator<<(const char* text) {
    s += text;
    return *this;
  }
  Out& operator<<(uint64_t v) {
    char b[24];
    s.append(b, static_cast<size_t>(std::to_chars(b, b + sizeof(b), v).ptr - b));
    return *this;
  }
  Out& operator<<(int v) {
    char b[16];
    s.append(b, static_cast<size_t>(std::to_chars(b, b + sizeof(b), v).ptr - b));
    return *this;
  }
  Out& operator<<(double v) {  // microseconds, to the nanosecond
    char b[40];
    s.append(b, static_cast<size_t>(std::to_chars(b, b + sizeof(b), v, std::chars_format::fixed, 3).ptr - b));
    return *this;
  }
};

}  // namespace

void CallTrace::format(const Event& e, double npt, std::string* text) {
  const double ts = clock_.sinceOriginUs(e.start, npt);
  const double dur = e.end > e.start ? static_cast<double>(e.end - e.start) * npt / 1000.0 : 0.0;
  Out out{*text};
  switch (e.kind) {
    case Kind::Call: {
      nameThread(kCallsTid, text);
      const bool p2p = e.coll == algorithms::Collective::Send || e.coll == algorithms::Collective::Recv;
      out << ",\n{\"name\":\"" << algorithms::collectiveName(e.coll)
          << "\",\"cat\":\"call\",\"ph\":\"X\",\"pid\":" << rank_ << ",\"tid\":0,\"ts\":" << ts << ",\"dur\":" << dur
          << ",\"args\":{\"call\":" << e.seq << ",\"dtype\":\"" << base::dataTypeName(e.type) << "\",\"op\":\""
          << base::reduceOpName(e.op) << "\",\"count\":" << e.count << ",\"bytes\":" << e.bytes
          << (p2p ? ",\"peer\":" : ",\"root\":") << static_cast<int>(e.peerOrRoot) << ",\"algorithm\":\""
          << algorithms::algorithmName(e.algo) << "\",\"transport\":\""
          << transportsNamed(e.transports, transportNames_).c_str() << "\",\"ok\":" << (e.flag ? "true" : "false")
          << "}}";
      break;
    }
    case Kind::Wait: {
      const uint64_t tid = waitTid(e.peerOrRoot, e.flag);
      nameThread(tid, text);
      out << ",\n{\"name\":\"" << (e.flag ? "recv from " : "send to ") << static_cast<int>(e.peerOrRoot)
          << "\",\"cat\":\"wait\",\"ph\":\"X\",\"pid\":" << rank_ << ",\"tid\":" << tid << ",\"ts\":" << ts
          << ",\"dur\":" << dur << ",\"args\":{\"call\":" << e.seq << ",\"coll\":\""
          << algorithms::collectiveName(e.coll) << "\",\"step\":" << e.count
          << ",\"peer\":" << static_cast<int>(e.peerOrRoot) << ",\"bytes\":" << e.bytes << "}}";
      break;
    }
    case Kind::Ddp: {
      const uint64_t tid = kDdpTid + e.seq;
      nameThread(tid, text);
      out << ",\n{\"name\":\"" << e.name << "\",\"cat\":\"ddp\",\"ph\":\"X\",\"pid\":" << rank_ << ",\"tid\":" << tid
          << ",\"ts\":" << ts << ",\"dur\":" << dur << ",\"args\":{\"bucket\":" << e.seq << ",\"bytes\":" << e.bytes
          << "}}";
      break;
    }
  }
}

void CallTrace::writeLocked() {
  if (events_.empty()) return;
  const double npt = clock_.nsPerTick();
  std::string text;
  text.reserve(events_.size() * 220);
  for (const Event& e : events_) format(e, npt, &text);
  events_.clear();
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0)
    COLLIE_WARN(base::kLogColl, "%s rank %d: writing the trace to %s failed: %s", name_.c_str(), rank_, path_.c_str(),
                base::errnoString(errno).c_str());
}

}  // namespace collie::core
