// CaseRun: one collective call with its buffers, split into its three phases so that a test can issue it
// blocking, async or inside a group, and check it later: the constructor makes and fills the buffers, start()
// issues the call, check() verifies, element by element, the result and every part of every buffer the call must
// not write (send buffers, non-root outputs, guard zones). checkCase (bodies.hpp) is the three in a row.
//
// `indexBase` shifts the global element index of every input and expected value (data.hpp), so that calls of one
// program with different bases hold different data and a message delivered to the wrong call is caught.
#pragma once

#include <collie/collie.hpp>
#include <cstddef>
#include <string>
#include <vector>

#include "common/bodies.hpp"
#include "common/data.hpp"

namespace collie::test {

class CaseRun {
 public:
  /// How start() issues the call.
  enum class Mode { Blocking, Async };

  /// `count` is per rank where the C API says so (AllGather sendcount, ReduceScatter recvcount, AllToAll block).
  /// SendRecv sends to rank + `shift` and receives from rank - `shift` (mod size). `op` is ignored by collectives
  /// that do not reduce.
  CaseRun(Communicator& comm, Coll coll, DataType type, ReduceOp op, size_t count, bool inPlace, int root,
          size_t indexBase = 0, int shift = 1);
  CaseRun(const CaseRun&) = delete;
  CaseRun& operator=(const CaseRun&) = delete;

  /// Issues the call (SendRecv: a send and a receive in a group of their own, nested in the caller's if any).
  /// Blocking: returns when it is done, and returns no Work. Async: returns its Works (SendRecv: the send's and the
  /// receive's; inside a group they complete at its end).
  std::vector<Work> start(Mode mode);
  /// Checks every buffer (after the call completed).
  void check() const;
  /// "AllReduce float32 sum count=7 nranks=4 in-place" and the index base when it is not 0.
  const std::string& name() const { return name_; }
  /// The collective as Communicator::lastCall() names it ("allreduce", ...; "" for SendRecv).
  std::string lastCallName() const;

 private:
  Communicator& comm_;
  Coll coll_;
  DataType type_;
  ReduceOp op_;
  size_t count_;
  bool inPlace_;
  int root_;
  size_t base_;
  int shift_;
  int rank_, n_;
  Buffer send_, recv_;
  std::string name_;
};

}  // namespace collie::test
