// Groups (collieGroupStart/End): calls made on this thread between the outermost start and end are recorded,
// then issued together at the end — one batch per communicator, all batches in flight at once so that
// several communicators driven by one thread (collieCommInitAll) progress together — and the end returns
// when all are done. Inside a batch, consecutive Send/Recv calls run concurrently.
#include "core/group.hpp"

#include <atomic>
#include <map>
#include <vector>

#include "base/errors.hpp"
#include "core/communicator.hpp"

namespace collie::core {
namespace {

struct GroupState {
  int depth = 0;
  std::vector<std::pair<CommImpl*, OpDesc>> ops;
};

std::atomic<int> openGroups{0};  // threads between their outermost groupStart and groupEnd

GroupState& group() {
  thread_local GroupState state;
  return state;
}

}  // namespace

bool inGroup() { return group().depth > 0; }

bool anyGroupOpen() { return openGroups.load(std::memory_order_relaxed) != 0; }

void groupStart() {
  if (group().depth++ == 0) openGroups.fetch_add(1, std::memory_order_relaxed);
}

void groupAdd(CommImpl* comm, OpDesc op) { group().ops.emplace_back(comm, std::move(op)); }

void groupEnd() {
  GroupState& g = group();
  COLLIE_USAGE_CHECK(g.depth > 0, "groupEnd without a matching groupStart");
  if (--g.depth > 0) return;
  openGroups.fetch_sub(1, std::memory_order_relaxed);
  std::vector<std::pair<CommImpl*, OpDesc>> ops;
  ops.swap(g.ops);
  // Batches in order of first appearance of each communicator.
  std::vector<CommImpl*> order;
  std::map<CommImpl*, std::vector<OpDesc>> batches;
  for (auto& [comm, op] : ops) {
    if (!batches.count(comm)) order.push_back(comm);
    batches[comm].push_back(std::move(op));
  }
  // Communicators sharing connections run one call at a time (link_share.hpp): two in one group would wait on each
  // other until the timeout.
  for (size_t i = 0; i < order.size(); ++i)
    for (size_t j = i + 1; j < order.size(); ++j)
      COLLIE_USAGE_CHECK(order[i]->sharingFamily() == nullptr || order[i]->sharingFamily() != order[j]->sharingFamily(),
                         "a group holds calls of %s and %s, which share their connections (split with "
                         "shareConnections): they run one call at a time, so call them in separate groups",
                         order[i]->name().c_str(), order[j]->name().c_str());
  std::vector<std::shared_ptr<WorkState>> works;
  for (CommImpl* comm : order) works.push_back(comm->submitBatch(std::move(batches[comm])));
  const WorkState* firstFailure = nullptr;
  for (auto& w : works) {
    w->wait();
    if (!firstFailure && w->code != ErrorCode::Success) firstFailure = w.get();
  }
  if (firstFailure) throw Error(firstFailure->code, firstFailure->message);
}

}  // namespace collie::core
