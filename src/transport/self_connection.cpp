// A rank's connection to itself: posted sends and posted receives are matched in the order they were posted
// (the first send with the first receive, and so on), their call fingerprints compared and the bytes copied.
// Matching happens in progress(), so progress() reports every completion like any other Connection. Only host
// memory is handled; device buffers are staged (or copied on the device) by the caller before they reach a
// Connection.
#include <cstring>
#include <deque>

#include "base/errors.hpp"
#include "transport/transport.hpp"

namespace collie::transport {
namespace {

class SelfConnection : public Connection {
 public:
  explicit SelfConnection(int rank) : rank_(rank) {}

  int peer() const override { return rank_; }

  void postSend(Transfer* t) override { post(sends_, t, "send"); }
  void postRecv(Transfer* t) override { post(recvs_, t, "receive"); }

  bool progress() override {
    bool moved = false;
    while (!sends_.empty() && !recvs_.empty()) {
      Transfer* s = sends_.front();
      Transfer* r = recvs_.front();
      if (s->fp != r->fp) throwMismatch(MismatchRecord{rank_, rank_, s->fp, r->fp}, "on the self connection");
      COLLIE_INTERNAL_CHECK(s->bytes == r->bytes,
                            "message size mismatch on the self connection of rank %d: send of %zu bytes, receive "
                            "of %zu bytes",
                            rank_, s->bytes, r->bytes);
      if (s->bytes > 0 && s->buf != r->buf) std::memmove(r->buf, s->buf, s->bytes);
      sends_.pop_front();
      recvs_.pop_front();
      s->complete = true;
      r->complete = true;
      moved = true;
    }
    return moved;
  }

  bool busy() const override { return !sends_.empty() || !recvs_.empty(); }

  void close() override {
    closed_ = true;
    sends_.clear();
    recvs_.clear();
  }

 private:
  void post(std::deque<Transfer*>& queue, Transfer* t, const char* what) {
    checkPosted("self connection", rank_, rank_, closed_, *t, what);
    t->complete = false;
    queue.push_back(t);
  }

  int rank_;
  bool closed_ = false;
  std::deque<Transfer*> sends_;
  std::deque<Transfer*> recvs_;
};

}  // namespace

std::unique_ptr<Connection> makeSelfConnection(int rank) { return std::make_unique<SelfConnection>(rank); }

}  // namespace collie::transport
