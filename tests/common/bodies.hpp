// Test bodies shared by the launchers: each runs on every rank of a communicator and checks, element by
// element, what this rank got. Every rank makes the same calls in the same order; a failed check is a
// non-fatal gtest failure, so no rank leaves the sequence early and leaves the others waiting.
#pragma once

#include <collie/collie.hpp>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/data.hpp"

namespace collie::test {

enum class Coll { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, SendRecv };
inline const std::vector<Coll> kAllColls = {Coll::AllReduce,     Coll::Broadcast, Coll::Reduce,  Coll::AllGather,
                                            Coll::ReduceScatter, Coll::AllToAll,  Coll::SendRecv};
std::string collName(Coll coll);
bool reduces(Coll coll);

/// 1M+3 elements: several slices per ring chunk at every nranks, and a size no slice or chunk divides.
inline constexpr size_t kLargeCount = (size_t{1} << 20) + 3;

/// The large count of `coll`'s matrix: kLargeCount, but for ReduceScatter, whose count is per rank, kLargeCount over
/// nranks, plus 3 (about kLargeCount elements in all, each rank's block the size of AllReduce's ring chunk; kLargeCount
/// per rank made every type x op move nranks times AllReduce's bytes: 93 s of ASan test time at 8 ranks).
inline size_t largeCountOf(Coll coll, int nranks) {
  return coll == Coll::ReduceScatter ? kLargeCount / static_cast<size_t>(nranks) + 3 : kLargeCount;
}

/// Runs f between groupStart and groupEnd; ends the group also when f throws.
template <typename F>
void grouped(F&& f) {
  groupStart();
  try {
    f();
  } catch (...) {
    try {
      groupEnd();
    } catch (...) {
    }
    throw;
  }
  groupEnd();
}

/// The cases one collective runs through.
struct Matrix {
  std::vector<DataType> types = kAllTypes;
  std::vector<ReduceOp> ops = kAllOps;
  std::vector<size_t> counts;  ///< duplicates run once
  bool inPlace = true;         ///< also run the in-place form where the collective has one
  bool verbose = false;        ///< rank 0 prints the time spent per count
};

/// One call of `coll` on this rank, checked: the result, the parts of every buffer the call must not write
/// (send buffers, non-root outputs, guard zones). `count` is per rank where the C API says so (AllGather
/// sendcount, ReduceScatter recvcount, AllToAll block). Out-of-place Broadcast passes the non-roots' own data as
/// sendbuff (it must be ignored).
void checkCase(Communicator& comm, Coll coll, DataType type, ReduceOp op, size_t count, bool inPlace, int root);

/// Every case of the matrix, in the same order on every rank; Broadcast and Reduce alternate between root
/// nranks-1 and root 0 from case to case.
void runMatrix(Communicator& comm, Coll coll, const Matrix& matrix);

/// Several allReduceAsync calls outstanding at once, mixed with blocking calls, waited for in order (and one
/// polled with test()); each result checked.
void asyncBody(Communicator& comm);
/// Groups: a ring exchange in both directions, several collectives issued together, nested groups, and the
/// async forms inside a group.
void groupBody(Communicator& comm);
/// split by rank parity with keys reversing the order: new ranks and sizes, an AllReduce and an AllGather on
/// each new communicator, a NOCOLOR rank getting none, and the parent still working afterwards.
void splitBody(Communicator& comm);
/// Barriers between small collectives.
void barrierBody(Communicator& comm);
/// A check of what the communicator ran (Communicator::lastCall()) that the bodies run after each call they make
/// (checkCase, and the calls of asyncBody, groupBody and splitBody). Tests that force an algorithm install one.
using CallCheck = std::function<void(const CallInfo& ran)>;
/// Installs `check` while it lives (install it before the ranks start; it is shared by them).
class CheckEachCall {
 public:
  explicit CheckEachCall(CallCheck check);
  ~CheckEachCall();
  CheckEachCall(const CheckEachCall&) = delete;
  CheckEachCall& operator=(const CheckEachCall&) = delete;

 private:
  CallCheck previous_;
};
/// After a call: that comm.lastCall() describes `collective` ("allreduce", ...; "" for a group of sends and
/// receives) and passes the installed check. Nothing without one.
void checkLastCall(Communicator& comm, const std::string& collective);

/// Runs the current test again in a child process of this binary, with `env` ("NAME=value") replacing those
/// variables in its environment: for params read once per process (COLLIE_SHM_DISABLE, COLLIE_ALGO). The child
/// tells that it is one by the variable being set. Returns the child's wait status (-1 if it could not start).
int rerunCurrentTestWith(const std::vector<std::string>& env);

/// Runs `body` in children of this binary (rerunCurrentTestWith), one per entry of `runs`, each with the variables of
/// `mark` ("NAME=value", which tells a child that it is one) and of its entry, and expects each to pass; in such a
/// child, runs `body` itself. For params read once per process; `runs` are named by their variables in failures.
void runInChildrenWith(const std::string& mark, const std::vector<std::vector<std::string>>& runs,
                       const std::function<void()>& body);

/// Expects call() to throw collie::Error with `code` and a message that holds every string of `mentions`; `what`
/// names the case in failures.
void expectError(const char* what, ErrorCode code, std::vector<std::string> mentions,
                 const std::function<void()>& call);

/// Bad arguments through the C++ API: the right error code, a message naming the argument, no buffer written,
/// and the communicator still working afterwards.
void badArgumentsBody(Communicator& comm);

/// Two live splits of `comm` both named `name` (as every torch process group is "torch"): the first runs 2
/// AllReduces, the second 3, checked; both are destroyed on return (the second first). For the tests that each
/// gets a trace and flight-recorder file of its own.
void twoSameNamedSplitsBody(Communicator& comm, const std::string& name);

}  // namespace collie::test
