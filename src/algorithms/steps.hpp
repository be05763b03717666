// Small constructors for Steps and Ranges, shared by the schedule builders.
#pragma once

#include "algorithms/schedule.hpp"

namespace collie::algorithms::steps {

inline Range in(size_t offset) { return {Buffer::Input, offset}; }
inline Range out(size_t offset) { return {Buffer::Output, offset}; }
inline Range scratch(size_t offset) { return {Buffer::Scratch, offset}; }
inline Range transient() { return {Buffer::Transient, 0}; }
inline Range at(Buffer b, size_t offset) { return {b, offset}; }

inline Step copy(Range src, Range dst, size_t count) {
  Step s;
  s.kind = StepKind::Copy;
  s.src = src;
  s.dst = dst;
  s.count = count;
  return s;
}

inline Step send(int peer, Range src, size_t count) {
  Step s;
  s.kind = StepKind::Send;
  s.sendPeer = peer;
  s.src = src;
  s.count = count;
  return s;
}

inline Step recv(int peer, Range dst, size_t count) {
  Step s;
  s.kind = StepKind::Recv;
  s.recvPeer = peer;
  s.dst = dst;
  s.count = count;
  return s;
}

/// RecvReduce (sendPeer < 0) or RecvReduceSend: dst = src op (received from recvPeer), then sent on.
inline Step recvReduce(int recvPeer, int sendPeer, Range src, Range dst, size_t count) {
  Step s;
  s.kind = sendPeer >= 0 ? StepKind::RecvReduceSend : StepKind::RecvReduce;
  s.recvPeer = recvPeer;
  s.sendPeer = sendPeer;
  s.src = src;
  s.dst = dst;
  s.count = count;
  return s;
}

/// RecvCopySend: receive from recvPeer into dst, forward to sendPeer.
inline Step recvCopySend(int recvPeer, int sendPeer, Range dst, size_t count) {
  Step s;
  s.kind = StepKind::RecvCopySend;
  s.recvPeer = recvPeer;
  s.sendPeer = sendPeer;
  s.dst = dst;
  s.count = count;
  return s;
}

}  // namespace collie::algorithms::steps
