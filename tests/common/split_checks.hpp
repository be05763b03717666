// Checks shared by the split tests with thread ranks (tests/threaded/test_split.cpp) and forked ranks
// (tests/multiproc/test_split_proc.cpp): who a split's members are, and every collective on a child.
#pragma once

#include <collie/collie.hpp>
#include <functional>
#include <string>
#include <vector>

namespace collie::test {

/// The old ranks (of a parent of `n` ranks) in new-rank order of the communicator that old rank `me` gets from
/// split(color(q), key(q)) on every rank q: the ranks of its color, by key, then by old rank.
std::vector<int> membersOf(int n, int me, const std::function<int(int)>& color, const std::function<int(int)>& key);
/// That `comm` has the size and rank `members` (old ranks in new-rank order) give the old rank `me`, and that an
/// AllGather of the old ranks on it gives `members`, element by element.
void expectMembers(Communicator& comm, const std::vector<int>& members, int me);
/// Every collective (AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, Send/Recv) on `comm`,
/// float32 and int32, sum and max, 1 and 4097 elements, in place and not, each checked element by element.
void everyCollectiveChecked(Communicator& comm);
/// "shm", or with COLLIE_SHM_DISABLE set "tcp" ("ucx" when COLLIE_NET=ucx too): what lastCall().transport says
/// between ranks of this host.
std::string expectedTransport();

}  // namespace collie::test
