// Groups (collieGroupStart/End): the thread-local state of the calls made between the outermost start and end,
// issued together at the end (group.cpp).
#pragma once

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

}  // namespace collie::core
