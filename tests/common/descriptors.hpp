// Counting a test process's descriptors: listening sockets, and open descriptors once in-flight handshakes are done.
#pragma once

namespace collie::test {

/// How many of this process's descriptors are listening sockets (tcp and unix).
int listeningSockets();
/// This process's open descriptors once their count holds still (the same in three reads 20 ms apart, 5 s at
/// most). A crossed dial (transport/dialer.hpp) leaves the lower rank's accept loop the turned-away hello of the
/// higher rank, with its socket and (shm) its three descriptors, which it closes after the pair is connected: a
/// collective that connected the pair may end before that, and a count taken then reads up to 4 high per peer.
long settledOpenDescriptors();

}  // namespace collie::test
