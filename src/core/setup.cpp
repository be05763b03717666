// Transports, PeerInfo and connecting a communicator's peers (see setup.hpp).
#include "core/setup.hpp"

#include <collie/config.h>
#include <dirent.h>
#include <sched.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"
#include "base/topology.hpp"
#include "core/bootstrap.hpp"
#include "core/card_directory.hpp"
#include "core/host_identity.hpp"
#include "transport/handshake.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"
#if COLLIE_WITH_UCX
#include "transport/ucx/ucx_transport.hpp"
#include "transport/ucx/ucx_worker.hpp"
#endif

namespace collie::core {
namespace {

/// Whether the kernel lists an RDMA device (InfiniBand, RoCE, iWARP) in /sys/class/infiniband.
[[maybe_unused]] bool hasRdmaDevice() {
  DIR* dir = opendir("/sys/class/infiniband");
  if (!dir) return false;
  bool any = false;
  while (dirent* e = readdir(dir)) any |= e->d_name[0] != '.';
  closedir(dir);
  return any;
}

}  // namespace

bool useUcx() {
  const std::string& net = base::params::net();
  if (strcasecmp(net.c_str(), "tcp") == 0) return false;
#if COLLIE_WITH_UCX
  if (strcasecmp(net.c_str(), "ucx") == 0) return true;
  // auto: UCX is asked (a UCP context, which installs UCX's memory hooks in this process) only where the kernel
  // has an RDMA device at all (InfiniBand and RoCE both appear in /sys/class/infiniband).
  return hasRdmaDevice() && transport::ucx::ucxHostInfo().rdma;
#else
  COLLIE_ENFORCE(strcasecmp(net.c_str(), "ucx") != 0, ErrorCode::InvalidArgument,
                 "COLLIE_NET=%s: this build of collie has no UCX transport (built without libucx-dev, or with "
                 "COLLIE_WITH_UCX=OFF)",
                 net.c_str());
  return false;
#endif
}

std::vector<std::unique_ptr<transport::Transport>> makeTransports() {
  std::vector<std::unique_ptr<transport::Transport>> list;
  if (base::params::shmDisable() == 0) list.push_back(std::make_unique<transport::ShmTransport>());  // same host
#if COLLIE_WITH_UCX
  if (useUcx()) list.push_back(std::make_unique<transport::UcxTransport>());  // before tcp: it wins where both can
#else
  useUcx();  // refuses COLLIE_NET=ucx
#endif
  list.push_back(std::make_unique<transport::TcpTransport>());
  return list;
}

transport::PeerInfo localPeerInfo(int rank) {
  transport::PeerInfo self;
  self.rank = rank;
  self.pid = getpid();
  self.hostHash = localHostIdentity(rank);  // the machine, or COLLIE_HOST_ID's host (host_identity.hpp)
  self.netNs = transport::networkNamespaceId();
  return self;
}

bool connectEagerly(ConnectMode mode, const std::vector<std::unique_ptr<transport::Transport>>& transports) {
  if (mode != ConnectMode::Default) return mode == ConnectMode::Eager;
  for (const auto& t : transports)
    if (!t->dialsAnyTime()) return true;
  return strcasecmp(base::params::connectMode().c_str(), "eager") == 0;
}

AgreedSettings agreedSettings(ConnectMode mode, const std::vector<std::unique_ptr<transport::Transport>>& transports) {
  AgreedSettings s;
  s.sliceBytes = base::params::sliceBytes();
  s.initChunk = base::params::initChunk();
  s.connectEager = connectEagerly(mode, transports) ? 1 : 0;
  s.cardDirectory = cardDirectoryMode() ? 1 : 0;
  return s;
}

int usableCpus() {
  cpu_set_t cpus;
  return std::max(1, sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1);
}

namespace {

/// Chooses each known peer's transport and how politely to spin, from links.ctx.peers.
void chooseTransports(Links& links) {
  const transport::CommContext& ctx = links.ctx;
  const int rank = ctx.rank, nranks = ctx.nranks;
  const auto& peers = ctx.peers;
  // More ranks of this communicator on this host than CPUs for them: waiting ranks must yield when they spin.
  int localRanks = 0;
  for (const auto& p : peers) localRanks += p.rank >= 0 && p.hostHash == peers[static_cast<size_t>(rank)].hostHash;
  const int ncpus = usableCpus();
  links.oversubscribed = localRanks > ncpus;
  links.cpusTaken = localRanks >= ncpus;
  // For each peer the first transport that can connect wins; both sides decide from the same table.
  links.transportOf.assign(static_cast<size_t>(nranks), -1);
  links.peerTransport.assign(static_cast<size_t>(nranks), "self");
  for (int r = 0; r < nranks; ++r) {
    if (r == rank) continue;
    if (peers[static_cast<size_t>(r)].rank < 0) {
      links.peerTransport[static_cast<size_t>(r)] = "unknown";
      continue;
    }
    int t = transport::chooseTransportIndex(links.transports, peers[static_cast<size_t>(rank)],
                                            peers[static_cast<size_t>(r)]);
    COLLIE_ENFORCE(t >= 0, ErrorCode::InvalidUsage, "%s rank %d: no transport can reach rank %d", ctx.name.c_str(),
                   rank, r);
    links.transportOf[static_cast<size_t>(r)] = t;
    links.peerTransport[static_cast<size_t>(r)] = links.transports[static_cast<size_t>(t)]->name();
  }
}

}  // namespace

void initLinks(Links& links, transport::CommContext ctx) {
  links.ctx = std::move(ctx);
  chooseTransports(links);
  links.conns.clear();
  links.conns.resize(static_cast<size_t>(links.ctx.nranks));
  links.conns[static_cast<size_t>(links.ctx.rank)] = transport::makeSelfConnection(links.ctx.rank);
  links.connectedPeers = 0;
  for (auto& t : links.transports)
    if (t->dialsAnyTime()) t->serve(links.ctx);  // peers may dial this rank from now on
}

void completeLinks(Links& links, std::vector<transport::PeerInfo> peers) {
  links.ctx.peers = std::move(peers);
  chooseTransports(links);
}

int connectPeers(Links& links, const std::vector<int>& peers, bool dial) {
  if (links.cardDirectory) learnCards(links, peers);  // a peer not met yet: its card from the directory first
  const transport::CommContext& ctx = links.ctx;
  std::vector<std::vector<int>> chosen(links.transports.size());
  for (int p : peers) {
    COLLIE_INTERNAL_CHECK(p >= 0 && p < ctx.nranks, "%s rank %d: connect to rank %d of %d", ctx.name.c_str(), ctx.rank,
                          p, ctx.nranks);
    if (p == ctx.rank || links.conns[static_cast<size_t>(p)]) continue;
    COLLIE_INTERNAL_CHECK(links.transportOf[static_cast<size_t>(p)] >= 0,
                          "%s rank %d: a call needs rank %d before its address is known (init's all-gather talks "
                          "only to the peers the bootstrap root named)",
                          ctx.name.c_str(), ctx.rank, p);
    auto& list = chosen[static_cast<size_t>(links.transportOf[static_cast<size_t>(p)])];
    if (std::find(list.begin(), list.end(), p) == list.end()) list.push_back(p);
  }
  int made = 0;
  for (size_t t = 0; t < links.transports.size(); ++t) {
    if (chosen[t].empty()) continue;
    std::sort(chosen[t].begin(), chosen[t].end());
    transport::Transport& tr = *links.transports[t];
    auto conns = dial && tr.dialsAnyTime() ? tr.dial(ctx, chosen[t]) : tr.connect(ctx, chosen[t]);
    for (size_t i = 0; i < chosen[t].size(); ++i) links.conns[static_cast<size_t>(chosen[t][i])] = std::move(conns[i]);
    made += static_cast<int>(chosen[t].size());
    links.connectedPeers += static_cast<int>(chosen[t].size());
    ++links.generation;
    COLLIE_INFO(base::kLogInit, "%s rank %d: connected %zu peer(s) over %s (%s); now connected to %d of %d peers",
                ctx.name.c_str(), ctx.rank, chosen[t].size(), links.transports[t]->name(),
                transport::handshake::rankList(chosen[t]).c_str(), links.connectedPeers.load(), ctx.nranks - 1);
  }
  return made;
}

void connectAll(Links& links) {
  std::vector<int> all;
  for (int r = 0; r < links.ctx.nranks; ++r)
    if (r != links.ctx.rank) all.push_back(r);
  connectPeers(links, all, false);
}

void releasePeer(Links& links, int peer) {
  const int t = links.transportOf[static_cast<size_t>(peer)];
  COLLIE_INTERNAL_CHECK(t >= 0 && links.conns[static_cast<size_t>(peer)],
                        "%s rank %d: release of rank %d, not connected", links.ctx.name.c_str(), links.ctx.rank, peer);
  links.transports[static_cast<size_t>(t)]->releasePeer(peer);
}

void closePeer(Links& links, int peer) {
  auto& conn = links.conns[static_cast<size_t>(peer)];
  if (!conn) return;
  conn->close();
  conn.reset();
  links.connectedPeers -= 1;
  ++links.generation;
}

std::vector<std::string> transportNames(const Links& links) {
  std::vector<std::string> names;
  for (const auto& t : links.transports) names.emplace_back(t->name());
  return names;
}

std::vector<std::string> kindsInUse(const std::vector<std::unique_ptr<transport::Transport>>& transports,
                                    const std::vector<transport::PeerInfo>& peers) {
  std::vector<std::string> kinds;
  for (size_t r = 1; r < peers.size() && kinds.size() < transports.size(); ++r) {
    const transport::Transport* t = transport::chooseTransport(transports, peers[0], peers[r]);
    if (t && std::find(kinds.begin(), kinds.end(), std::string(t->name())) == kinds.end()) kinds.push_back(t->name());
  }
  return kinds;
}

ChildTransports childTransports(const std::vector<std::unique_ptr<transport::Transport>>& parent,
                                transport::PeerInfo* fresh) {
  ChildTransports out;
  std::vector<std::unique_ptr<transport::Transport>> made;  // makeTransports(), only when a transport cannot share
  for (const auto& t : parent) {
    if (auto shared = t->shareListener()) {
      out.shared.push_back(shared->kind());
      out.list.push_back(std::move(shared));
      continue;
    }
    if (!fresh) continue;
    if (made.empty()) made = makeTransports();
    auto same = std::find_if(made.begin(), made.end(), [&](const auto& m) { return m && m->kind() == t->kind(); });
    COLLIE_ENFORCE(same != made.end(), ErrorCode::InvalidUsage,
                   "a new communicator cannot use its parent's %s transport: the environment no longer selects it "
                   "(COLLIE_NET, COLLIE_SHM_DISABLE)",
                   t->name());
    (*same)->listen(*fresh);
    out.list.push_back(std::move(*same));
  }
  return out;
}

transport::PeerInfo childPeerInfo(const transport::PeerInfo& parentEntry, int rank,
                                  const std::vector<transport::TransportKind>& shared,
                                  const transport::TransportAddress* fresh) {
  transport::PeerInfo info = parentEntry;
  info.rank = rank;
  for (transport::TransportAddress& a : info.addresses)
    if (a.kind != 0 &&
        std::find(shared.begin(), shared.end(), static_cast<transport::TransportKind>(a.kind)) == shared.end())
      a = transport::TransportAddress{};
  for (int i = 0; fresh && i < transport::PeerInfo::kMaxAddresses; ++i)
    if (fresh[i].kind != 0)
      info.setAddress(static_cast<transport::TransportKind>(fresh[i].kind), fresh[i].bytes,
                      std::min<size_t>(fresh[i].length, transport::TransportAddress::kBytes));
  return info;
}

std::array<uint8_t, 16> deriveSecret(const std::array<uint8_t, 16>& parent, uint64_t tweak) {
  const auto mix = [](uint64_t x) {  // splitmix64's finalizer
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  uint64_t a = 0, b = 0;
  std::memcpy(&a, parent.data(), 8);
  std::memcpy(&b, parent.data() + 8, 8);
  const uint64_t x = mix(a ^ mix(b ^ mix(tweak)));
  const uint64_t y = mix(b ^ mix(x ^ tweak ^ 0x5851f42d4c957f2dull));
  std::array<uint8_t, 16> secret{};
  std::memcpy(secret.data(), &x, 8);
  std::memcpy(secret.data() + 8, &y, 8);
  return secret;
}

std::array<uint8_t, 16> splitSecret(const std::array<uint8_t, 16>& parent, int epoch, int color) {
  // "SPLT" in the top bits keeps a split's tweak apart from a shrink's (an FNV hash, shrink.cpp).
  const uint64_t tweak = (uint64_t{0x53504c54} << 32) ^ (static_cast<uint64_t>(static_cast<uint32_t>(epoch)) << 16) ^
                         static_cast<uint32_t>(color) ^ (static_cast<uint64_t>(static_cast<uint32_t>(color)) << 48);
  return deriveSecret(parent, tweak);
}

}  // namespace collie::core
