// The transport-independent parts of transport.hpp: the opaque per-transport addresses of a PeerInfo, the
// network namespace id, the one rule that picks the transport of a peer pair, and the plain mismatch error.
#include "transport/transport.hpp"

#include <sys/stat.h>

#include <cstring>

#include "base/errors.hpp"

namespace collie::transport {

const TransportAddress* PeerInfo::address(TransportKind kind) const {
  for (const TransportAddress& a : addresses)
    if (a.kind == static_cast<uint8_t>(kind) && kind != TransportKind::None) return &a;
  return nullptr;
}

void PeerInfo::setAddress(TransportKind kind, const void* bytes, size_t length) {
  COLLIE_INTERNAL_CHECK(kind != TransportKind::None && length <= TransportAddress::kBytes,
                        "address of transport kind %d: %zu bytes (at most %zu)", static_cast<int>(kind), length,
                        TransportAddress::kBytes);
  TransportAddress* slot = const_cast<TransportAddress*>(address(kind));
  for (TransportAddress& a : addresses)
    if (!slot && a.kind == 0) slot = &a;
  COLLIE_INTERNAL_CHECK(slot != nullptr, "no free address slot for transport kind %d (%d in use)",
                        static_cast<int>(kind), kMaxAddresses);
  *slot = TransportAddress{};
  slot->kind = static_cast<uint8_t>(kind);
  slot->length = static_cast<uint8_t>(length);
  if (length) std::memcpy(slot->bytes, bytes, length);
}

bool contactKnown(const PeerInfo& info) {
  for (const TransportAddress& a : info.addresses)
    if (a.kind != 0 && a.length == 0) return false;
  return true;
}

const PeerInfo* CardBook::find(int rank) const {
  if (nranks <= 0 || rank < 0 || rank >= nranks) return nullptr;
  const size_t at = static_cast<size_t>((rank - first + nranks) % nranks);
  return at < cards.size() ? &cards[at] : nullptr;
}

uint64_t networkNamespaceId() {
  struct stat st {};
  if (stat("/proc/self/ns/net", &st) != 0) return 0;  // unknown: peers that cannot tell either are assumed alike
  return static_cast<uint64_t>(st.st_ino) ^ (static_cast<uint64_t>(st.st_dev) << 32);
}

int chooseTransportIndex(const std::vector<std::unique_ptr<Transport>>& transports, const PeerInfo& local,
                         const PeerInfo& peer) {
  for (size_t i = 0; i < transports.size(); ++i)
    if (transports[i] && transports[i]->canConnect(local, peer)) return static_cast<int>(i);
  return -1;
}

Transport* chooseTransport(const std::vector<std::unique_ptr<Transport>>& transports, const PeerInfo& local,
                           const PeerInfo& peer) {
  int i = chooseTransportIndex(transports, local, peer);
  return i < 0 ? nullptr : transports[static_cast<size_t>(i)].get();
}

void failPosted(const char* connection, int rank, int peer, bool closed, const Transfer& t, const char* what) {
  COLLIE_USAGE_CHECK(!closed, "%s posted on the closed %s of rank %d to peer %d", what, connection, rank, peer);
  COLLIE_INTERNAL_CHECK(t.kind == MemoryKind::Host,
                        "%s of rank %d to peer %d: %s of a device buffer (device buffers must be staged)", connection,
                        rank, peer, what);
  COLLIE_INTERNAL_CHECK(t.bytes == 0 || t.buf != nullptr, "%s of rank %d to peer %d: %s of %zu bytes at null",
                        connection, rank, peer, what, t.bytes);
  COLLIE_FAIL(ErrorCode::InternalError, "%s of rank %d to peer %d: failPosted with nothing wrong", connection, rank,
              peer);
}

bool Connection::probe(Arrival* next) {
  (void)next;
  COLLIE_FAIL(ErrorCode::InvalidUsage,
              "a receive from any source cannot use the connection to peer %d: its transport cannot look at a "
              "message before a receive is posted for it (name the source, or use the tcp or shm transport)",
              peer());
}

void throwMismatch(const MismatchRecord& r, const char* where) {
  auto fp = [](const Fingerprint& f) {
    return base::format("call #%u root %u shape 0x%016llx", f.call, f.root, static_cast<unsigned long long>(f.shape));
  };
  throw MismatchError(
      r, base::format("ranks made different calls (learnt %s): rank %d called {%s}; rank %d called {%s}", where,
                      r.rankA, fp(r.a).c_str(), r.rankB, fp(r.b).c_str()));
}

}  // namespace collie::transport
