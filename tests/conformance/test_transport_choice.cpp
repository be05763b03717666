// Which transport links a pair (chooseTransport, the one rule the communicator, calibration and collie_info use)
// and the opaque per-transport addresses of a PeerInfo, with real listening transports.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "base/socket.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace collie::transport {
namespace {

TEST(PeerInfoAddresses, EachTransportPublishesItsOwn) {
  PeerInfo info;
  EXPECT_EQ(info.address(TransportKind::Tcp), nullptr);
  EXPECT_EQ(info.address(TransportKind::None), nullptr);
  const char a[] = "abc";
  info.setAddress(TransportKind::Shm, a, 3);
  ASSERT_NE(info.address(TransportKind::Shm), nullptr);
  EXPECT_EQ(info.address(TransportKind::Shm)->length, 3);
  EXPECT_EQ(info.address(TransportKind::Tcp), nullptr);
  info.setAddress(TransportKind::Shm, "wxyz", 4);  // replaces, takes no second slot
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(info.address(TransportKind::Shm)->bytes), 4), "wxyz");
  int used = 0;
  for (const TransportAddress& slot : info.addresses) used += slot.kind != 0 ? 1 : 0;
  EXPECT_EQ(used, 1);
  std::vector<uint8_t> tooLong(TransportAddress::kBytes + 1);
  EXPECT_THROW(info.setAddress(TransportKind::Tcp, tooLong.data(), tooLong.size()), Error);
  // Fixed size: the bootstrap all-gathers it byte for byte.
  static_assert(std::is_trivially_copyable_v<PeerInfo>);
}

TEST(ChooseTransport, FirstThatCanConnectWins) {
  std::vector<std::unique_ptr<Transport>> list;
  list.push_back(std::make_unique<ShmTransport>());
  TcpOptions tcp;
  tcp.bindAddr = base::parseAddress("127.0.0.1:0");
  list.push_back(std::make_unique<TcpTransport>(tcp));
  PeerInfo self;
  self.rank = 0;
  self.hostHash = 7;
  for (auto& t : list) t->listen(self);
  EXPECT_EQ(TcpTransport::addressOf(self).ss_family, AF_INET);
  EXPECT_FALSE(ShmTransport::addressOf(self).empty());

  PeerInfo peer = self;
  peer.rank = 1;
  EXPECT_EQ(chooseTransport(list, self, peer), list[0].get()) << "same host: shm";
  EXPECT_EQ(chooseTransportIndex(list, self, peer), 0);
  PeerInfo otherNs = peer;
  otherNs.netNs ^= 1;
  EXPECT_EQ(chooseTransport(list, self, otherNs), list[1].get()) << "other network namespace: tcp";
  PeerInfo otherHost = peer;
  otherHost.hostHash ^= 1;
  EXPECT_EQ(chooseTransport(list, self, otherHost), list[1].get()) << "other host: tcp";
  EXPECT_EQ(chooseTransport(list, otherHost, self), list[1].get()) << "both sides agree";
  PeerInfo noShm;  // same host, shm disabled there: only a tcp address
  noShm.rank = 1;
  noShm.hostHash = self.hostHash;
  noShm.netNs = self.netNs;
  noShm.setAddress(TransportKind::Tcp, self.address(TransportKind::Tcp)->bytes,
                   self.address(TransportKind::Tcp)->length);
  EXPECT_EQ(chooseTransport(list, self, noShm), list[1].get());
  EXPECT_EQ(chooseTransport(list, noShm, self), list[1].get());

  std::vector<std::unique_ptr<Transport>> shmOnly;
  shmOnly.push_back(std::make_unique<ShmTransport>());
  EXPECT_EQ(chooseTransport(shmOnly, self, otherHost), nullptr);
  EXPECT_EQ(chooseTransportIndex(shmOnly, self, otherHost), -1);
}

}  // namespace
}  // namespace collie::transport
