// The dial rule's Dialer (transport/dialer.hpp) against a communicator that fails while it answers a dial, the
// refusals it sends once failed (a plain one, and one that carries the mismatch it failed on), and the question of
// which calls a rank waits in (askWaiting), answered beside the dial rule.
//
// Two Dialers in this process are ranks 0 and 1 of one 2-rank communicator (same secret), each serving its own
// loopback TCP Listener on the process's real accept loop, with the real Handshake. The transport part is this
// file's own: a handshake message is a bare Header (a hello, and its answer), and a connection is the dialled or
// answered socket itself (TestConnection: blocking sends and receives on it).
//
// Regression (commit e810e59): Dialer::take answers a dial outside its lock, on the accept loop's thread. A
// refuseAll() (the communicator failing) that ran meanwhile used to make take() drop the link once answered: the
// dialler, which counts itself connected as soon as the answer arrives, then found the socket closed ("peer exited
// or died") instead of the poison its failing peer sends on every link it holds. refuseAll must wait for the
// answers under way and return their connections. Rank 1's answer() here blocks on a gate the test holds, so the
// race is made to happen every time, not by chance.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/errors.hpp"
#include "base/socket.hpp"
#include "transport/accept_loop.hpp"
#include "transport/dialer.hpp"
#include "transport/fingerprint.hpp"

namespace collie::transport::handshake {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kHelloType = 1;
constexpr uint32_t kAnswerType = 2;
/// Every wait of the test ends within this (a hang fails the test instead).
constexpr auto kBound = 5s;

/// Handshake messages: one Header each, read as it arrives (like tcp's StreamWire).
class HeaderWire : public Wire {
 public:
  size_t messageBytes() const override { return sizeof(Header); }
  int read(Link& link) override {
    link.buf.resize(sizeof(Header));
    while (link.got < sizeof(Header)) {
      const ssize_t n = ::recv(link.fd.get(), link.buf.data() + link.got, sizeof(Header) - link.got, MSG_DONTWAIT);
      if (n > 0) {
        link.got += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
      }
    }
    return 1;
  }
};

/// A pair's connection: the handshake socket, with blocking exact-size transfers.
class TestConnection : public Connection {
 public:
  TestConnection(int peer, UniqueFd fd) : peer_(peer), fd_(std::move(fd)) { base::setNonBlocking(fd_.get(), false); }
  int peer() const override { return peer_; }
  void postSend(Transfer* t) override {
    base::sendAll(fd_.get(), t->buf, t->bytes, std::chrono::steady_clock::now() + kBound, "test peer");
    t->complete = true;
  }
  void postRecv(Transfer* t) override {
    base::recvAll(fd_.get(), t->buf, t->bytes, std::chrono::steady_clock::now() + kBound, "test peer");
    t->complete = true;
  }
  bool progress() override { return false; }
  bool busy() const override { return false; }
  void close() override { fd_.reset(); }

 private:
  int peer_;
  UniqueFd fd_;
};

/// Holds answer() until released (bounded), and tells when it got there.
class AnswerGate {
 public:
  void enterAndWait() {
    std::unique_lock<std::mutex> lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait_for(lock, 2 * kBound, [this] { return released_; });
  }
  bool awaitEntered() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kBound, [this] { return entered_; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false, released_ = false;
};

/// The test transport's messages: a hello, answered by an answer; the socket is the connection.
class TestProtocol : public DialProtocol {
 public:
  TestProtocol(const std::vector<sockaddr_storage>& addresses, AnswerGate* gate) : addresses_(addresses), gate_(gate) {}

  /// This rank's dial of `peer` waits on `gate`, then fails as if the peer were gone (RemoteError).
  void failDialOf(int peer, AnswerGate* gate) {
    failPeer_ = peer;
    dialGate_ = gate;
  }

  UniqueFd dialSocket(Handshake& hs, int peer, int /*channel*/) override {
    if (peer == failPeer_) {
      dialGate_->enterAndWait();
      COLLIE_FAIL(ErrorCode::RemoteError, "test: rank %d is gone", peer);
    }
    return UniqueFd(
        base::connectWithRetry(addresses_[static_cast<size_t>(peer)], hs.deadline(), 10, "test peer", {}, 3));
  }
  void sendHello(Handshake& hs, Link& link) override {
    link.from = base::addressToString(addresses_[static_cast<size_t>(link.peer)]);
    send(hs, link, kHelloType);
    base::setNonBlocking(link.fd.get(), true);
  }
  void onAnswer(Handshake& /*hs*/, Link& link) override {
    EXPECT_EQ(link.header().type, kAnswerType);
    link.done = true;
  }
  void answer(Handshake& hs, Link& link) override {
    EXPECT_EQ(link.header().type, kHelloType);
    if (gate_) gate_->enterAndWait();
    send(hs, link, kAnswerType);
  }
  std::unique_ptr<Connection> finish(Handshake& /*hs*/, int peer, std::vector<Link>& links, bool /*dialled*/) override {
    return std::make_unique<TestConnection>(peer, std::move(links.at(0).fd));
  }

 private:
  static void send(Handshake& hs, Link& link, uint32_t type) {
    const Header h = hs.header(type, link.peer, link.channel);
    base::sendAll(link.fd.get(), &h, sizeof(h), hs.deadline(), "test peer");
  }

  const std::vector<sockaddr_storage>& addresses_;
  AnswerGate* gate_;
  int failPeer_ = -1;
  AnswerGate* dialGate_ = nullptr;
};

/// The n ranks of one communicator: a listener, a context and a Dialer each (rank 1's answers held by `gate`).
struct Ranks {
  std::vector<sockaddr_storage> addresses;
  std::vector<std::unique_ptr<Listener>> listeners;
  std::vector<CommContext> ctx;
  HeaderWire wire;
  AnswerGate gate;
  std::vector<std::unique_ptr<TestProtocol>> protocols;
  std::vector<std::unique_ptr<Dialer>> dialers;  // after the listeners: destroyed before them

  explicit Ranks(int n = 2) : addresses(static_cast<size_t>(n)), ctx(static_cast<size_t>(n)) {
    for (int r = 0; r < n; ++r) {
      addresses[r] = base::parseAddress("127.0.0.1:0");
      UniqueFd fd(base::listenOn(addresses[r]));
      base::setNonBlocking(fd.get(), true);
      listeners.push_back(std::make_unique<Listener>(std::move(fd), std::make_unique<HeaderWire>(), "test", r));
      ctx[r].rank = r;
      ctx[r].nranks = n;
      ctx[r].peers.resize(static_cast<size_t>(n));
      for (size_t i = 0; i < sizeof(ctx[r].secret); ++i) ctx[r].secret[i] = static_cast<uint8_t>(0xa5 ^ i);
      ctx[r].name = "dialer test";
      ctx[r].timeout = std::chrono::duration_cast<std::chrono::milliseconds>(kBound) - 1s;
      protocols.push_back(std::make_unique<TestProtocol>(addresses, r == 1 ? &gate : nullptr));
      dialers.push_back(std::make_unique<Dialer>("test", TransportKind::Tcp, 1, *protocols[r], wire));
      dialers[r]->serve(*listeners[r], ctx[r]);
    }
  }
  ~Ranks() { gate.release(); }  // never leaves the accept loop held, whatever failed
};

/// Sends 8 bytes from `from` to `to` and checks they arrive: the two are the ends of one live socket.
void expectLinked(Connection& from, Connection& to, uint64_t value) {
  uint64_t got = 0;
  Transfer send{&value, sizeof(value)}, recv{&got, sizeof(got)};
  from.postSend(&send);
  to.postRecv(&recv);
  EXPECT_TRUE(send.complete && recv.complete);
  EXPECT_EQ(got, value);
}

TEST(Dialer, AnswerInFlightWhenTheCommunicatorFailsIsReturnedByRefuseAll) {
  Ranks ranks;
  std::future<std::vector<std::unique_ptr<Connection>>> dialled, refused;
  struct ReleaseFirst {  // on every way out: the gate opens before the futures wait for their threads
    AnswerGate& gate;
    ~ReleaseFirst() { gate.release(); }
  } releaseFirst{ranks.gate};
  dialled = std::async(std::launch::async,
                       [&] { return ranks.dialers[0]->connect(*ranks.listeners[0], ranks.ctx[0], {1}, true); });
  ASSERT_TRUE(ranks.gate.awaitEntered()) << "rank 1 never began to answer rank 0's dial";

  // Rank 1's communicator fails while it answers: refuseAll must wait for that answer.
  refused = std::async(std::launch::async, [&] { return ranks.dialers[1]->refuseAll(ranks.ctx[1]); });
  EXPECT_EQ(refused.wait_for(200ms), std::future_status::timeout) << "refuseAll did not wait for the answer under way";
  ranks.gate.release();
  ASSERT_EQ(refused.wait_for(kBound), std::future_status::ready) << "refuseAll still waits after the answer was sent";
  const std::vector<std::unique_ptr<Connection>> answered = refused.get();
  ASSERT_EQ(dialled.wait_for(kBound), std::future_status::ready) << "rank 0's dial never ended";
  const std::vector<std::unique_ptr<Connection>> mine = dialled.get();  // throws if the dial failed

  // The dialler counts itself connected; rank 1 holds the other end of that very socket, to poison or close.
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0]->peer(), 1);
  ASSERT_EQ(answered.size(), 1u) << "the link answered while the communicator failed was dropped, not returned";
  EXPECT_EQ(answered[0]->peer(), 0);
  expectLinked(*mine[0], *answered[0], 0x0123456789abcdefULL);
  expectLinked(*answered[0], *mine[0], 0xfedcba9876543210ULL);
}

TEST(Dialer, DialAfterRefuseAllIsTurnedDown) {
  Ranks ranks;
  ranks.gate.release();
  EXPECT_TRUE(ranks.dialers[1]->refuseAll(ranks.ctx[1]).empty());
  try {
    ranks.dialers[0]->connect(*ranks.listeners[0], ranks.ctx[0], {1}, true);
    ADD_FAILURE() << "rank 0 connected to rank 1, whose communicator had failed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::RemoteError) << e.what();  // at once, not the timeout
    EXPECT_NE(std::string(e.what()).find("turned the connection down"), std::string::npos) << e.what();
  }
}

// A communicator that failed on mismatched calls says which in its refusal (kRefusedMismatch and the record): the
// dialler throws MismatchError with that record, at once; a record naming a rank outside the communicator is not
// believed (RemoteError, as a plain refusal).
TEST(Dialer, DialAfterRefuseAllWithAMismatchThrowsThatMismatch) {
  for (bool valid : {true, false}) {
    SCOPED_TRACE(valid ? "a record of ranks 1 and 0" : "a record naming rank 7 of 2");
    Ranks ranks;
    ranks.gate.release();
    const MismatchRecord why{valid ? 1 : 7, 0, Fingerprint{3, 0, 0x1111}, Fingerprint{3, 0, 0x2222}};
    EXPECT_TRUE(ranks.dialers[1]->refuseAll(ranks.ctx[1], &why).empty());
    const auto start = std::chrono::steady_clock::now();
    try {
      ranks.dialers[0]->connect(*ranks.listeners[0], ranks.ctx[0], {1}, true);
      ADD_FAILURE() << "rank 0 connected to rank 1, whose communicator had failed";
    } catch (const MismatchError& e) {
      EXPECT_TRUE(valid) << e.what();
      EXPECT_EQ(e.record().rankA, 1);
      EXPECT_EQ(e.record().rankB, 0);
      EXPECT_EQ(e.record().a, why.a);
      EXPECT_EQ(e.record().b, why.b);
    } catch (const Error& e) {
      EXPECT_FALSE(valid) << e.what();
      EXPECT_EQ(e.code(), ErrorCode::RemoteError) << e.what();
      EXPECT_NE(std::string(e.what()).find("mismatched calls"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  }
}

// Rank 0 dials ranks 1 and 2 (in that order); its dial of 1 hangs, then fails (rank 1 gone), before it opens its dial
// of 2. Meanwhile rank 2 dials rank 0 and is turned away as a duplicate (rank 0, the lower, is dialling it). Rank 0's
// connect fails and its communicator refuses dials. Rank 2 must hear so soon (it dials again when rank 0's dial does
// not come), not wait its whole timeout for a dial rank 0 gave up.
TEST(Dialer, ATurnedAwayDialWhosePeerGaveUpItsOwnDialFailsSoon) {
  Ranks ranks(3);
  ranks.gate.release();  // rank 1 answers at once (nobody dials it here but rank 0, whose dial fails first)
  AnswerGate dialGate;
  ranks.protocols[0]->failDialOf(1, &dialGate);
  struct ReleaseFirst {
    AnswerGate& gate;
    ~ReleaseFirst() { gate.release(); }
  } releaseFirst{dialGate};
  auto lo = std::async(std::launch::async, [&]() -> std::string {
    try {
      ranks.dialers[0]->connect(*ranks.listeners[0], ranks.ctx[0], {1, 2}, true);
      return "connected";
    } catch (const Error& e) {
      ranks.dialers[0]->refuseAll(ranks.ctx[0]);  // as its failing communicator does
      return e.what();
    }
  });
  ASSERT_TRUE(dialGate.awaitEntered()) << "rank 0 never dialled rank 1";
  const auto start = std::chrono::steady_clock::now();
  auto hi = std::async(std::launch::async, [&]() -> std::string {
    try {
      ranks.dialers[2]->connect(*ranks.listeners[2], ranks.ctx[2], {0}, true);
      return "connected";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::RemoteError) << e.what();
      return e.what();
    }
  });
  std::this_thread::sleep_for(200ms);  // rank 2's hello reaches rank 0 while it dials rank 2: turned away
  dialGate.release();                  // rank 0's connect fails before it opens its dial of rank 2
  ASSERT_EQ(lo.wait_for(kBound), std::future_status::ready);
  EXPECT_NE(lo.get().find("rank 1 is gone"), std::string::npos);
  ASSERT_EQ(hi.wait_for(kBound), std::future_status::ready) << "rank 2 still waits for rank 0's dial";
  const std::string h = hi.get();
  EXPECT_NE(h.find("turned the connection down"), std::string::npos) << h;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << h;
}

// A waiting rank asks a peer which calls it waits in (Dialer::askWaiting, through the peer's listener): it gets what
// the peer shows, no more than WaitingCalls::kMax, nothing once the peer shows nothing, the last call it published
// (LastCall), and the mismatch a failed
// peer knows of. Asking leaves the pair as it was: no connection is answered, and the pair connects afterwards.
TEST(Dialer, AskWaitingTellsWhatThePeerShowsAndLeavesThePairAlone) {
  Ranks ranks;
  ranks.gate.release();
  auto nothing = ranks.dialers[0]->askWaiting(ranks.ctx[0], 1);
  ASSERT_TRUE(nothing.has_value()) << "rank 1 answers";
  EXPECT_TRUE(nothing->waiting.empty()) << "rank 1 shows nothing yet";
  EXPECT_FALSE(nothing->last.has_value()) << "rank 1 shows no last call yet";
  std::vector<Fingerprint> shown;
  for (uint32_t i = 0; i < WaitingCalls::kMax + 2; ++i) shown.push_back(Fingerprint{7 + i, i, 0x1000 + i});
  ranks.dialers[1]->showWaiting({shown[0], shown[1]});
  std::vector<Fingerprint> told = ranks.dialers[0]->askWaiting(ranks.ctx[0], 1).value_or(ToldCalls{}).waiting;
  ASSERT_EQ(told.size(), 2u);
  EXPECT_EQ(told[0], shown[0]);
  EXPECT_EQ(told[1], shown[1]);
  ranks.dialers[1]->showWaiting(shown);
  told = ranks.dialers[0]->askWaiting(ranks.ctx[0], 1).value_or(ToldCalls{}).waiting;
  ASSERT_EQ(told.size(), WaitingCalls::kMax);
  for (size_t i = 0; i < told.size(); ++i) EXPECT_EQ(told[i], shown[i]) << i;
  EXPECT_TRUE(ranks.dialers[1]->answeredPeers().empty()) << "a question was taken for a dial";
  ranks.dialers[1]->showWaiting({});
  nothing = ranks.dialers[0]->askWaiting(ranks.ctx[0], 1);
  ASSERT_TRUE(nothing.has_value());
  EXPECT_TRUE(nothing->waiting.empty());
  // The last call published, told beside the waiting calls (none here), and each later one in its place.
  auto last = std::make_shared<LastCall>();
  ranks.dialers[1]->showLastCall(last);
  EXPECT_FALSE(ranks.dialers[0]->askWaiting(ranks.ctx[0], 1).value_or(ToldCalls{}).last.has_value()) << "none yet";
  for (uint32_t i = 0; i < 3; ++i) {
    last->publish(shown[i]);
    const std::optional<ToldCalls> said = ranks.dialers[0]->askWaiting(ranks.ctx[0], 1);
    ASSERT_TRUE(said.has_value());
    EXPECT_TRUE(said->waiting.empty());
    ASSERT_TRUE(said->last.has_value());
    EXPECT_EQ(*said->last, shown[i]);
  }

  // The pair still connects, from either side.
  const auto conns = ranks.dialers[1]->connect(*ranks.listeners[1], ranks.ctx[1], {0}, true);
  // Rank 0 records the pair as answered once its answer is sent, which may be just after rank 1's connect returns.
  const auto answeredBy = std::chrono::steady_clock::now() + kBound;
  while (ranks.dialers[0]->answeredPeers().empty() && std::chrono::steady_clock::now() < answeredBy)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(ranks.dialers[0]->answeredPeers(), std::vector<int>{1});
  const auto other = ranks.dialers[0]->connect(*ranks.listeners[0], ranks.ctx[0], {1}, true);
  ASSERT_EQ(conns.size(), 1u);
  ASSERT_EQ(other.size(), 1u);
  expectLinked(*conns[0], *other[0], 0x5a5a5a5a5a5a5a5aULL);

  // A failed peer answers with what it failed on.
  const MismatchRecord why{1, 0, Fingerprint{3, 0, 0x1111}, Fingerprint{3, 0, 0x2222}};
  ranks.dialers[1]->refuseAll(ranks.ctx[1], &why);
  try {
    ranks.dialers[0]->askWaiting(ranks.ctx[0], 1);
    ADD_FAILURE() << "the failed peer's mismatch was not told";
  } catch (const MismatchError& e) {
    EXPECT_EQ(e.record().a, why.a);
    EXPECT_EQ(e.record().b, why.b);
  }
}

// Whoever asks without the communicator's secret is told nothing (the listener holds its question as any
// stranger's hello), and the asker gives up within a moment rather than waiting its call's timeout.
TEST(Dialer, AskWaitingWithAnotherSecretIsToldNothing) {
  Ranks ranks;
  ranks.gate.release();
  ranks.dialers[1]->showWaiting({Fingerprint{1, 0, 0x42}});
  CommContext stranger = ranks.ctx[0];
  stranger.secret[0] ^= 1;
  TestProtocol protocol(ranks.addresses, nullptr);
  Dialer other("test", TransportKind::Tcp, 1, protocol, ranks.wire);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(other.askWaiting(stranger, 1).has_value()) << "no answer, not an empty one";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_EQ(ranks.dialers[0]->askWaiting(ranks.ctx[0], 1).value_or(ToldCalls{}).waiting.size(), 1u)
      << "the rank with the secret is told";
}

}  // namespace
}  // namespace collie::transport::handshake
