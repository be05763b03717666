// Groups (collieGroupStart/End): the thread-local state of the calls made between the outermost start and end,
// issued together at the end (group.cpp).
#pragma once

#include <string>

#include "core/op_desc.hpp"

namespace collie::core {

class CommImpl;

/// True while this thread is between groupStart and its matching groupEnd.
bool inGroup();
/// False when no thread of the process is inside a group: one relaxed load, where inGroup() reads thread-local
/// state (the prepared path of a repeated call, prepared_call.hpp, asks this first).
bool anyGroupOpen();
void groupStart();
/// Issues the calls recorded since the outermost groupStart, one batch per communicator, and waits for them all.
void groupEnd();
/// groupEnd without the wait: every call in the group must be an async one (its Work reports it), else InvalidUsage
/// and nothing is issued.
void groupEndAsync();
/// Records a call made inside a group.
void groupAdd(CommImpl* comm, OpDesc op);
/// Records that a call made inside this thread's open group was refused (it threw instead of being recorded), as
/// NCCL's group does: the outermost groupEnd (or groupEndAsync) then issues none of the group's calls, fails their
/// Works and throws with this code and message. The first refusal is kept; nothing happens outside a group.
void groupRefuse(ErrorCode code, const std::string& why);
/// For a communicator being destroyed: drops its calls recorded in this thread's open group (their Works fail) and
/// fails the group (groupRefuse), which must not touch the communicator once it is gone. Nothing when there are none.
/// A group open on another thread is not reached: destroying a communicator that another thread still uses is not
/// allowed.
void groupForget(CommImpl* comm);

}  // namespace collie::core
