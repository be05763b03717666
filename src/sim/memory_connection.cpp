#include "sim/memory_connection.hpp"

#include <algorithm>
#include <cstring>
#include <queue>
#include <unordered_map>

#include "base/errors.hpp"

namespace collie::sim {

namespace {

struct Pending {
  Transfer* t = nullptr;
  size_t bytes = 0;
  double posted = 0;
  double arrival = 0;   // sends: when the bytes reach the peer
  bool reduce = false;  // receives: reduced after landing
  bool done = false;
};

// A FIFO that allocates nothing until used (a fabric of n ranks may hold n^2 of them).
struct Queue {
  std::vector<Pending> items;
  size_t head = 0;
  bool empty() const { return head == items.size(); }
  size_t size() const { return items.size() - head; }
  Pending& operator[](size_t i) { return items[head + i]; }
  Pending& front() { return items[head]; }
  void push_back(const Pending& p) { items.push_back(p); }
  void pop_front() {
    if (++head == items.size()) {
      items.clear();
      head = 0;
    } else if (head >= 64 && head * 2 >= items.size()) {
      items.erase(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(head));
      head = 0;
    }
  }
  template <typename F>
  void forEach(F&& f) const {
    for (size_t i = head; i < items.size(); ++i) f(items[i]);
  }
};

// One direction of a peer pair: a's sends to b and b's receives from a.
struct Link {
  int from = 0, to = 0;
  Queue sends, recvs;
  size_t base = 0;     // absolute index of sends.front() and recvs.front()
  size_t matched = 0;  // transfers matched so far (absolute count)
  std::vector<uint8_t> marks;
  size_t nextMark = 0;
  size_t sendsPosted = 0, recvsPosted = 0;
};

struct Event {
  double time;
  uint64_t seq;
  Link* link;
  size_t index;   // absolute transfer index on the link
  bool recvOnly;  // only the receive completes (after its reduction)
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

}  // namespace

struct MemoryFabric::State {
  int nranks;
  MemoryCost cost;
  bool copyData;
  double now = 0;
  uint64_t seq = 0;
  std::unordered_map<uint64_t, std::unique_ptr<Link>> links;
  std::vector<std::vector<Link*>> linksOf;  // by rank: every link it sends or receives on
  std::vector<double> outFree, inFree, cpuFree;
  std::vector<int> hostOf;                      // by rank; empty: one host
  MemoryCost interHost;                         // costs of a message between hosts
  std::vector<double> hostOutFree, hostInFree;  // by host: its one network port each way
  std::vector<uint64_t> bytes, messages, completions;
  std::vector<uint8_t> wokenMark;
  std::vector<int> woken;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;

  State(int n, MemoryCost c, bool copy)
      : nranks(n),
        cost(c),
        copyData(copy),
        linksOf(static_cast<size_t>(n)),
        outFree(static_cast<size_t>(n), 0),
        inFree(static_cast<size_t>(n), 0),
        cpuFree(static_cast<size_t>(n), 0),
        bytes(static_cast<size_t>(n), 0),
        messages(static_cast<size_t>(n), 0),
        completions(static_cast<size_t>(n), 0),
        wokenMark(static_cast<size_t>(n), 0) {}

  Link* link(int from, int to) {
    auto key = static_cast<uint64_t>(from) * static_cast<uint64_t>(nranks) + static_cast<uint64_t>(to);
    auto& l = links[key];
    if (!l) {
      l = std::make_unique<Link>();
      l->from = from;
      l->to = to;
      linksOf[static_cast<size_t>(from)].push_back(l.get());
      linksOf[static_cast<size_t>(to)].push_back(l.get());
    }
    return l.get();
  }

  void wake(int rank) {
    ++completions[static_cast<size_t>(rank)];
    if (!wokenMark[static_cast<size_t>(rank)]) {
      wokenMark[static_cast<size_t>(rank)] = 1;
      woken.push_back(rank);
    }
  }

  void postSend(Link* l, Transfer* t) {
    auto a = static_cast<size_t>(l->from), b = static_cast<size_t>(l->to);
    Pending p;
    p.t = t;
    p.bytes = t->bytes;
    p.posted = now;
    // The sender's port serializes its messages, the receiver's port its incoming ones; a message waits for a
    // busy receiving port without holding the sender's (a switch buffers it).
    // Between hosts, the message also holds the sending host's and the receiving host's network port.
    const bool remote = !hostOf.empty() && hostOf[a] != hostOf[b];
    const MemoryCost& c = remote ? interHost : cost;
    const double busy = c.overhead + static_cast<double>(t->bytes) * c.beta;
    double* hostOut = remote ? &hostOutFree[static_cast<size_t>(hostOf[a])] : nullptr;
    double* hostIn = remote ? &hostInFree[static_cast<size_t>(hostOf[b])] : nullptr;
    const double depart = std::max({now, outFree[a], hostOut ? *hostOut : 0.0});
    outFree[a] = depart + busy;
    const double enter = std::max({depart + c.alpha, inFree[b], hostIn ? *hostIn : 0.0});
    inFree[b] = enter + busy;
    if (remote) {
      *hostOut = depart + busy;
      *hostIn = enter + busy;
    }
    p.arrival = enter + busy;
    t->complete = false;
    l->sends.push_back(p);
    ++l->sendsPosted;
    bytes[a] += t->bytes;
    ++messages[a];
    match(l);
  }

  void postRecv(Link* l, Transfer* t) {
    Pending p;
    p.t = t;
    p.bytes = t->bytes;
    p.posted = now;
    if (l->nextMark < l->marks.size()) p.reduce = l->marks[l->nextMark] != 0;
    ++l->nextMark;
    t->complete = false;
    l->recvs.push_back(p);
    ++l->recvsPosted;
    match(l);
  }

  void match(Link* l) {
    while (l->matched < l->base + l->sends.size() && l->matched < l->base + l->recvs.size()) {
      const size_t k = l->matched;
      Pending& s = l->sends[k - l->base];
      Pending& r = l->recvs[k - l->base];
      COLLIE_INTERNAL_CHECK(s.bytes == r.bytes,
                            "message size mismatch from rank %d to rank %d: transfer #%zu is a send of %zu bytes and "
                            "a receive of %zu bytes",
                            l->from, l->to, k, s.bytes, r.bytes);
      double deliver = std::max(s.arrival, r.posted);
      events.push(Event{deliver, seq++, l, k, false});
      if (r.reduce && cost.gamma > 0) {
        auto b = static_cast<size_t>(l->to);
        double done = std::max(deliver, cpuFree[b]) + static_cast<double>(r.bytes) * cost.gamma;
        cpuFree[b] = done;
        events.push(Event{done, seq++, l, k, true});
        r.reduce = true;
      } else {
        r.reduce = false;  // completes on delivery
      }
      ++l->matched;
    }
  }

  void fire(const Event& e) {
    Link* l = e.link;
    Pending& s = l->sends[e.index - l->base];
    Pending& r = l->recvs[e.index - l->base];
    if (!e.recvOnly) {
      if (copyData && s.bytes > 0 && s.t->buf != r.t->buf) std::memcpy(r.t->buf, s.t->buf, s.bytes);
      s.done = s.t->complete = true;
      wake(l->from);
    }
    if (e.recvOnly || !r.reduce) {
      r.done = r.t->complete = true;
      wake(l->to);
    }
    while (!l->sends.empty() && !l->recvs.empty() && l->base < l->matched && l->sends.front().done &&
           l->recvs.front().done) {
      l->sends.pop_front();
      l->recvs.pop_front();
      ++l->base;
    }
  }

  bool deliverDue() {
    bool any = false;
    while (!events.empty() && events.top().time <= now) {
      Event e = events.top();
      events.pop();
      fire(e);
      any = true;
    }
    return any;
  }
};

namespace {

class MemoryConnection : public Connection {
 public:
  MemoryConnection(std::shared_ptr<MemoryFabric::State> state, int rank, int peer)
      : state_(std::move(state)),
        rank_(rank),
        peer_(peer),
        out_(state_->link(rank, peer)),
        in_(state_->link(peer, rank)) {}

  int peer() const override { return peer_; }

  void postSend(Transfer* t) override {
    check(t, "send");
    state_->postSend(out_, t);
  }
  void postRecv(Transfer* t) override {
    check(t, "receive");
    state_->postRecv(in_, t);
  }

  bool progress() override {
    const uint64_t before = state_->completions[static_cast<size_t>(rank_)];
    state_->deliverDue();
    return state_->completions[static_cast<size_t>(rank_)] != before;
  }

  bool busy() const override {
    bool any = false;
    out_->sends.forEach([&](const Pending& p) { any |= !p.done; });
    in_->recvs.forEach([&](const Pending& p) { any |= !p.done; });
    return any;
  }

  void close() override { closed_ = true; }

 private:
  void check(const Transfer* t, const char* what) const {
    COLLIE_USAGE_CHECK(!closed_, "%s posted on the closed memory connection of rank %d to rank %d", what, rank_, peer_);
    COLLIE_INTERNAL_CHECK(t->bytes == 0 || t->buf != nullptr || !state_->copyData,
                          "memory connection of rank %d to rank %d: %s of %zu bytes from null", rank_, peer_, what,
                          t->bytes);
  }

  std::shared_ptr<MemoryFabric::State> state_;
  int rank_, peer_;
  Link* out_;
  Link* in_;
  bool closed_ = false;
};

}  // namespace

MemoryFabric::MemoryFabric(int nranks, MemoryCost cost, bool copyData)
    : state_(std::make_shared<State>(nranks, cost, copyData)) {}

MemoryFabric::~MemoryFabric() = default;

void MemoryFabric::setHosts(std::vector<int> hostOf, MemoryCost interHost) {
  COLLIE_ARG_CHECK(hostOf.empty() || static_cast<int>(hostOf.size()) == state_->nranks,
                   "memory fabric of %d ranks: %zu host entries", state_->nranks, hostOf.size());
  int hosts = 0;
  for (int h : hostOf) hosts = std::max(hosts, h + 1);
  state_->hostOf = std::move(hostOf);
  state_->interHost = interHost;
  state_->hostOutFree.assign(static_cast<size_t>(hosts), 0);
  state_->hostInFree.assign(static_cast<size_t>(hosts), 0);
}

std::unique_ptr<transport::Connection> MemoryFabric::connect(int rank, int peer) {
  COLLIE_ARG_CHECK(rank >= 0 && rank < state_->nranks && peer >= 0 && peer < state_->nranks && rank != peer,
                   "memory fabric of %d ranks: cannot connect rank %d to rank %d", state_->nranks, rank, peer);
  return std::make_unique<MemoryConnection>(state_, rank, peer);
}

void MemoryFabric::setReduceMarks(int rank, int peer, std::vector<uint8_t> marks) {
  Link* l = state_->link(peer, rank);
  l->marks = std::move(marks);
  l->nextMark = 0;
}

double MemoryFabric::now() const { return state_->now; }

bool MemoryFabric::advanceClock() {
  if (state_->events.empty()) return false;
  state_->now = std::max(state_->now, state_->events.top().time);
  return true;
}

bool MemoryFabric::deliverDue() { return state_->deliverDue(); }

void MemoryFabric::takeWoken(std::vector<int>& ranks) {
  for (int r : state_->woken) {
    state_->wokenMark[static_cast<size_t>(r)] = 0;
    ranks.push_back(r);
  }
  state_->woken.clear();
}

bool MemoryFabric::quiet() const {
  if (!state_->events.empty()) return false;
  for (const auto& [key, l] : state_->links)
    if (l->sendsPosted != l->recvsPosted || !l->sends.empty() || !l->recvs.empty()) return false;
  return true;
}

std::string MemoryFabric::pendingOf(int rank) const {
  std::string out;
  for (const Link* l : state_->linksOf[static_cast<size_t>(rank)]) {
    size_t undoneSends = 0, undoneRecvs = 0;
    l->sends.forEach([&](const Pending& p) { undoneSends += !p.done; });
    l->recvs.forEach([&](const Pending& p) { undoneRecvs += !p.done; });
    if (l->from == rank && undoneSends > 0) {
      out += base::format("%s%zu send(s) to rank %d not delivered (it posted %zu of %zu receives)",
                          out.empty() ? "" : "; ", undoneSends, l->to, l->recvsPosted, l->sendsPosted);
    }
    if (l->to == rank && undoneRecvs > 0) {
      out += base::format("%s%zu receive(s) from rank %d not delivered (it sent %zu of %zu)", out.empty() ? "" : "; ",
                          undoneRecvs, l->from, l->sendsPosted, l->recvsPosted);
    }
  }
  return out;
}

uint64_t MemoryFabric::bytesSent(int rank) const { return state_->bytes[static_cast<size_t>(rank)]; }
uint64_t MemoryFabric::messagesSent(int rank) const { return state_->messages[static_cast<size_t>(rank)]; }

std::pair<std::unique_ptr<transport::Connection>, std::unique_ptr<transport::Connection>> makeMemoryConnectionPair(
    int a, int b) {
  // A private fabric just big enough for the two ranks; the connections keep its state alive.
  MemoryFabric fabric(std::max(a, b) + 1);
  return {fabric.connect(a, b), fabric.connect(b, a)};
}

}  // namespace collie::sim
