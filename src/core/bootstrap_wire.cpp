// Bootstrap hello and reply encoding and parsing (see bootstrap_wire.hpp). Every read goes through Reader, which
// checks the bytes left first, so no input can make a parser read past what it was given.
#include "core/bootstrap_wire.hpp"

#include <cstring>

#include "base/errors.hpp"

namespace collie::core {
namespace {

class Writer {
 public:
  explicit Writer(size_t bytes) { out_.reserve(bytes); }
  void put(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  template <typename T>
  void put(const T& v) {
    put(&v, sizeof(v));
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const char* what) : p_(data), left_(size), what_(what) {}
  void get(void* dst, size_t n) {
    COLLIE_ENFORCE(n <= left_, ErrorCode::RemoteError, "%s is truncated", what_);
    if (n) std::memcpy(dst, p_, n);
    p_ += n;
    left_ -= n;
  }
  template <typename T>
  T get() {
    T v;
    get(&v, sizeof(v));
    return v;
  }
  size_t left() const { return left_; }

 private:
  const uint8_t* p_;
  size_t left_;
  const char* what_;
};

/// Throws RemoteError when `info` (from another process) is not a well-formed PeerInfo of `rank`.
void checkPeerInfo(const transport::PeerInfo& info, int rank, const char* what) {
  COLLIE_ENFORCE(info.rank == rank, ErrorCode::RemoteError, "%s: the peer info of rank %d says it is rank %d", what,
                 rank, info.rank);
  for (const transport::TransportAddress& a : info.addresses) {
    COLLIE_ENFORCE(a.length <= transport::TransportAddress::kBytes, ErrorCode::RemoteError,
                   "%s: rank %d publishes a %u-byte transport address (at most %zu)", what, rank, a.length,
                   transport::TransportAddress::kBytes);
  }
}

/// A setting's value as the user would write it: 0 of a setting whose 0 means "unset" says so.
std::string settingText(int64_t value, const char* zero) {
  return value == 0 ? std::string(zero) : std::to_string(value);
}

}  // namespace

std::string describeSettingsDifference(const AgreedSettings& a, int rankA, const AgreedSettings& b, int rankB) {
  auto differ = [&](const char* name, const std::string& va, const std::string& vb) {
    return base::format("%s is %s on rank %d but %s on rank %d; it must be the same on every rank", name, va.c_str(),
                        rankA, vb.c_str(), rankB);
  };
  if (a.sliceBytes != b.sliceBytes)
    return differ("COLLIE_SLICE_BYTES", settingText(a.sliceBytes, "0 (unset)"), settingText(b.sliceBytes, "0 (unset)"));
  if (a.initChunk != b.initChunk)
    return differ("COLLIE_INIT_CHUNK", settingText(a.initChunk, "0 (unset)"), settingText(b.initChunk, "0 (unset)"));
  if (a.connectEager != b.connectEager) {
    auto mode = [](int64_t eager) { return std::string(eager ? "eager" : "lazy"); };
    return differ("COLLIE_CONNECT (or the config's connect mode)", mode(a.connectEager), mode(b.connectEager));
  }
  if (a.cardDirectory != b.cardDirectory) {
    auto mode = [](int64_t directory) { return std::string(directory ? "directory" : "all"); };
    return differ("COLLIE_PEER_CARDS", mode(a.cardDirectory), mode(b.cardDirectory));
  }
  return {};
}

std::vector<uint8_t> encodeBootstrapHello(const BootstrapHello& hello) {
  Writer w(kBootstrapHelloBytes);
  w.put(kBootstrapMagic);
  w.put(hello.secret.data(), hello.secret.size());
  w.put(hello.rank);
  w.put(hello.nranks);
  w.put(hello.info);
  w.put(hello.settings);
  return w.take();
}

BootstrapHello parseBootstrapHello(const uint8_t* data, size_t size) {
  const char* what = "bootstrap hello";
  COLLIE_ENFORCE(size == kBootstrapHelloBytes, ErrorCode::RemoteError, "%s has %zu bytes, expected %zu", what, size,
                 kBootstrapHelloBytes);
  Reader r(data, size, what);
  auto magic = r.get<uint32_t>();
  COLLIE_ENFORCE(magic == kBootstrapMagic, ErrorCode::RemoteError, "%s has a bad magic 0x%08x (expected 0x%08x)", what,
                 magic, kBootstrapMagic);
  BootstrapHello hello;
  r.get(hello.secret.data(), hello.secret.size());
  hello.rank = r.get<int32_t>();
  hello.nranks = r.get<int32_t>();
  COLLIE_ENFORCE(hello.nranks >= 1, ErrorCode::RemoteError, "%s says nranks=%d", what, hello.nranks);
  COLLIE_ENFORCE(hello.rank >= 0 && hello.rank < hello.nranks, ErrorCode::RemoteError,
                 "%s says rank %d, outside [0, %d)", what, hello.rank, hello.nranks);
  r.get(&hello.info, sizeof(hello.info));
  checkPeerInfo(hello.info, hello.rank, what);
  r.get(&hello.settings, sizeof(hello.settings));
  const AgreedSettings& s = hello.settings;
  COLLIE_ENFORCE(s.sliceBytes >= 0 && s.initChunk >= 0 && (s.connectEager == 0 || s.connectEager == 1) &&
                     (s.cardDirectory == 0 || s.cardDirectory == 1),
                 ErrorCode::RemoteError,
                 "%s of rank %d holds impossible settings (slice %lld, chunk %lld, eager %lld, card directory %lld)",
                 what, hello.rank, static_cast<long long>(s.sliceBytes), static_cast<long long>(s.initChunk),
                 static_cast<long long>(s.connectEager), static_cast<long long>(s.cardDirectory));
  return hello;
}

std::vector<uint8_t> encodeBootstrapReply(const BootstrapReply& reply) {
  const bool ok = reply.status == ErrorCode::Success;
  Writer w(kBootstrapReplyHeaderBytes + (ok ? reply.table.size() * sizeof(transport::PeerInfo) : 0));
  w.put(kBootstrapMagic);
  w.put(static_cast<int32_t>(reply.status));
  w.put(static_cast<int32_t>(ok ? reply.table.size() : 0));
  char message[kBootstrapMessageBytes] = {0};
  std::memcpy(message, reply.message.data(), std::min(reply.message.size(), sizeof(message) - 1));
  w.put(message, sizeof(message));
  if (ok) w.put(reply.table.data(), reply.table.size() * sizeof(transport::PeerInfo));
  return w.take();
}

size_t bootstrapReplyBytes(const uint8_t* header, size_t size, const std::vector<int>& ranks) {
  const int expected = static_cast<int>(ranks.size());
  const char* what = "bootstrap reply";
  Reader r(header, size, what);
  auto magic = r.get<uint32_t>();
  COLLIE_ENFORCE(magic == kBootstrapMagic, ErrorCode::RemoteError, "%s has a bad magic 0x%08x (expected 0x%08x)", what,
                 magic, kBootstrapMagic);
  auto status = r.get<int32_t>();
  auto count = r.get<int32_t>();
  if (status != static_cast<int32_t>(ErrorCode::Success)) return kBootstrapReplyHeaderBytes;
  COLLIE_ENFORCE(count == expected, ErrorCode::RemoteError, "%s holds a table of %d ranks, expected %d", what, count,
                 expected);
  return kBootstrapReplyHeaderBytes + static_cast<size_t>(expected) * sizeof(transport::PeerInfo);
}

BootstrapReply parseBootstrapReply(const uint8_t* data, size_t size, const std::vector<int>& ranks) {
  const char* what = "bootstrap reply";
  const size_t expected = bootstrapReplyBytes(data, size, ranks);
  COLLIE_ENFORCE(size == expected, ErrorCode::RemoteError, "%s has %zu bytes, expected %zu", what, size, expected);
  Reader r(data, size, what);
  r.get<uint32_t>();  // magic, checked above
  auto status = r.get<int32_t>();
  auto count = r.get<int32_t>();
  char message[kBootstrapMessageBytes];
  r.get(message, sizeof(message));
  BootstrapReply reply;
  COLLIE_ENFORCE(status >= 0 && status <= static_cast<int32_t>(ErrorCode::Timeout) &&
                     status != static_cast<int32_t>(ErrorCode::InProgress),
                 ErrorCode::RemoteError, "%s has an unknown status %d", what, status);
  reply.status = static_cast<ErrorCode>(status);
  if (reply.status != ErrorCode::Success) {
    COLLIE_ENFORCE(count == 0, ErrorCode::RemoteError, "%s refuses but holds a table of %d ranks", what, count);
    reply.message.assign(message, strnlen(message, sizeof(message)));
    return reply;
  }
  reply.table.resize(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    transport::PeerInfo& info = reply.table[i];
    r.get(&info, sizeof(info));
    checkPeerInfo(info, ranks[i], what);
  }
  return reply;
}

}  // namespace collie::core
