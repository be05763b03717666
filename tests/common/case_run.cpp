#include "common/case_run.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>

namespace collie::test {
namespace {

size_t sendCount(Coll coll, size_t count, bool inPlace, size_t n) {
  switch (coll) {
    case Coll::AllGather:
      return inPlace ? 0 : count;
    case Coll::ReduceScatter:
    case Coll::AllToAll:
      return n * count;
    default:
      return count;
  }
}

size_t recvCount(Coll coll, size_t count, bool inPlace, size_t n) {
  switch (coll) {
    case Coll::AllGather:
    case Coll::AllToAll:
      return n * count;
    case Coll::SendRecv:
      return count;
    default:
      return inPlace ? 0 : count;
  }
}

bool hasInPlaceForm(Coll coll) { return coll != Coll::AllToAll && coll != Coll::SendRecv; }

}  // namespace

CaseRun::CaseRun(Communicator& comm, Coll coll, DataType type, ReduceOp op, size_t count, bool inPlace, int root,
                 size_t indexBase, int shift)
    : comm_(comm),
      coll_(coll),
      type_(type),
      op_(reduces(coll) ? op : kNoReduction),
      count_(count),
      inPlace_(inPlace && hasInPlaceForm(coll)),
      root_(root),
      base_(indexBase),
      shift_(shift),
      rank_(comm.rank()),
      n_(comm.size()),
      send_(type, sendCount(coll, count, inPlace_, static_cast<size_t>(n_))),
      recv_(type, recvCount(coll, count, inPlace_, static_cast<size_t>(n_))) {
  name_ = collName(coll) + " " + typeName(type);
  if (reduces(coll)) name_ += " " + opName(op_);
  name_ += " count=" + std::to_string(count) + " nranks=" + std::to_string(n_);
  if (hasInPlaceForm(coll)) name_ += inPlace_ ? " in-place" : " out-of-place";
  if (coll == Coll::Broadcast || coll == Coll::Reduce) name_ += " root=" + std::to_string(root);
  if (coll == Coll::SendRecv && shift != 1) name_ += " shift=" + std::to_string(shift);
  if (indexBase != 0) name_ += " base=" + std::to_string(indexBase);
  const size_t me = static_cast<size_t>(rank_), all = static_cast<size_t>(n_) * count;
  switch (coll) {
    case Coll::Broadcast:
      if (!inPlace_ || rank_ == root)
        send_.fillInput(0, count, op_, rank_, base_);  // in place: non-roots hold sentinels
      break;
    case Coll::AllGather:
      if (inPlace_) {
        recv_.fillInput(me * count, count, op_, rank_, base_);  // the other blocks hold sentinels
      } else {
        send_.fillInput(0, count, op_, rank_, base_);
      }
      break;
    case Coll::ReduceScatter:
    case Coll::AllToAll:  // block p, element j: input(rank, p*count + j)
      send_.fillInput(0, all, op_, rank_, base_);
      break;
    default:
      send_.fillInput(0, count, op_, rank_, base_);
  }
}

std::string CaseRun::lastCallName() const {
  if (coll_ == Coll::SendRecv) return "";
  std::string name = collName(coll_);  // "ReduceScatter" -> "reducescatter"
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name;
}

std::vector<Work> CaseRun::start(Mode mode) {
  const bool async = mode == Mode::Async;
  const size_t me = static_cast<size_t>(rank_);
  void* send = send_.data();
  void* out = inPlace_ ? send : recv_.data();
  std::vector<Work> works;
  auto issue = [&](auto&& blocking, auto&& asyncForm) {
    if (async) {
      works.push_back(asyncForm());
    } else {
      blocking();
    }
  };
  switch (coll_) {
    case Coll::AllReduce:
      issue([&] { comm_.allReduce(send, out, count_, type_, op_); },
            [&] { return comm_.allReduceAsync(send, out, count_, type_, op_); });
      break;
    case Coll::Broadcast:
      issue([&] { comm_.broadcast(send, out, count_, type_, root_); },
            [&] { return comm_.broadcastAsync(send, out, count_, type_, root_); });
      break;
    case Coll::Reduce:
      issue([&] { comm_.reduce(send, out, count_, type_, op_, root_); },
            [&] { return comm_.reduceAsync(send, out, count_, type_, op_, root_); });
      break;
    case Coll::AllGather: {
      const void* in = inPlace_ ? recv_.at(me * count_) : send;
      issue([&] { comm_.allGather(in, recv_.data(), count_, type_); },
            [&] { return comm_.allGatherAsync(in, recv_.data(), count_, type_); });
      break;
    }
    case Coll::ReduceScatter: {
      void* rs = inPlace_ ? send_.at(me * count_) : recv_.data();
      issue([&] { comm_.reduceScatter(send, rs, count_, type_, op_); },
            [&] { return comm_.reduceScatterAsync(send, rs, count_, type_, op_); });
      break;
    }
    case Coll::AllToAll:
      issue([&] { comm_.allToAll(send, recv_.data(), count_, type_); },
            [&] { return comm_.allToAllAsync(send, recv_.data(), count_, type_); });
      break;
    case Coll::SendRecv: {
      const int to = (rank_ + shift_) % n_, from = ((rank_ - shift_) % n_ + n_) % n_;
      grouped([&] {  // in a group, so that a rank may send to itself
        if (async) {
          works.push_back(comm_.sendAsync(send, count_, type_, to));
          works.push_back(comm_.recvAsync(recv_.data(), count_, type_, from));
        } else {
          comm_.send(send, count_, type_, to);
          comm_.recv(recv_.data(), count_, type_, from);
        }
      });
      break;
    }
  }
  return works;
}

void CaseRun::check() const {
  SCOPED_TRACE(name_);
  const size_t me = static_cast<size_t>(rank_), count = count_, base = base_;
  const DataType type = type_;
  const ReduceOp op = op_;
  const int rank = rank_, n = n_;
  const void* send = send_.data();
  const void* out = inPlace_ ? send : recv_.data();
  switch (coll_) {
    case Coll::AllReduce:
      EXPECT_TRUE(matchesReduced(out, count, type, op, n, base));
      break;
    case Coll::Broadcast:
      EXPECT_TRUE(matchesInput(out, count, type, op, root_, base));
      break;
    case Coll::Reduce:
      if (rank == root_) {
        EXPECT_TRUE(matchesReduced(out, count, type, op, n, base));
      } else if (inPlace_) {
        EXPECT_TRUE(matchesInput(out, count, type, op, rank, base)) << "a non-root's (in-place) buffer was written";
      } else {
        EXPECT_TRUE(isSentinel(out, count, type)) << "a non-root's recvbuff was written";
      }
      break;
    case Coll::AllGather:
      for (int p = 0; p < n; ++p) {
        const size_t first = static_cast<size_t>(p) * count;
        EXPECT_TRUE(
            matchesInput(static_cast<const char*>(recv_.data()) + first * typeSize(type), count, type, op, p, base))
            << "block " << p;
      }
      break;
    case Coll::ReduceScatter: {
      const void* rs = inPlace_ ? static_cast<const char*>(send) + me * count * typeSize(type) : recv_.data();
      EXPECT_TRUE(matchesReduced(rs, count, type, op, n, base + me * count));
      for (int p = 0; p < n; ++p) {
        if (inPlace_ && p == rank) continue;
        const size_t first = static_cast<size_t>(p) * count;
        EXPECT_TRUE(
            matchesInput(static_cast<const char*>(send) + first * typeSize(type), count, type, op, rank, base + first))
            << "block " << p << " of sendbuff was written";
      }
      break;
    }
    case Coll::AllToAll:
      for (int p = 0; p < n; ++p) {
        const size_t first = static_cast<size_t>(p) * count;
        EXPECT_TRUE(matchesInput(static_cast<const char*>(recv_.data()) + first * typeSize(type), count, type, op, p,
                                 base + me * count))
            << "block " << p;
      }
      EXPECT_TRUE(matchesInput(send, static_cast<size_t>(n) * count, type, op, rank, base)) << "sendbuff was written";
      break;
    case Coll::SendRecv: {
      const int from = ((rank - shift_) % n + n) % n;
      EXPECT_TRUE(matchesInput(recv_.data(), count, type, op, from, base)) << "from rank " << from;
      break;
    }
  }
  const bool sendIsInput = coll_ == Coll::AllReduce || coll_ == Coll::Broadcast || coll_ == Coll::Reduce ||
                           coll_ == Coll::SendRecv || (coll_ == Coll::AllGather && !inPlace_);
  if (sendIsInput && !inPlace_) {
    EXPECT_TRUE(matchesInput(send, count, type, op, rank, base)) << "sendbuff was written";
  }
  EXPECT_TRUE(send_.guardsIntact());
  EXPECT_TRUE(recv_.guardsIntact());
}

}  // namespace collie::test
