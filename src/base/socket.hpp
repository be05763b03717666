// Socket helpers shared by the bootstrap and the TCP transport: addresses, interface selection with
// NCCL's COLLIE_SOCKET_IFNAME grammar, listening, connecting with retries and backoff, and blocking
// exact-size I/O with a deadline (for the bootstrap; the data path uses non-blocking sockets).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace collie::base {

using Deadline = std::chrono::steady_clock::time_point;

/// "1.2.3.4:5" or "[::1]:5".
std::string addressToString(const sockaddr_storage& addr);
/// Parses "host:port", "[v6]:port" or "v6" forms; resolves host names (getaddrinfo). Throws InvalidArgument.
sockaddr_storage parseAddress(const std::string& hostPort);
int addressPort(const sockaddr_storage& addr);
void setAddressPort(sockaddr_storage& addr, int port);
socklen_t addressLength(const sockaddr_storage& addr);

/// The most bytes packAddress writes: an IPv6 address's port, address and scope id.
constexpr size_t kPackedAddressBytes = 2 + 16 + 4;
/// `addr` (IPv4 or IPv6) in the fewest bytes that say it, for tables that hold one address per rank: port and
/// address (6 bytes) for IPv4, port, address and scope id (22) for IPv6 (its flow info is dropped: a listening
/// address has none). Returns the bytes written to `out` (kPackedAddressBytes of room). Throws InvalidArgument for
/// another family.
size_t packAddress(const sockaddr_storage& addr, uint8_t* out);
/// The address packAddress wrote in `length` bytes; ss_family is AF_UNSPEC when `length` is neither form's.
sockaddr_storage unpackAddress(const uint8_t* bytes, size_t length);

/// One usable local interface address.
struct InterfaceAddress {
  std::string name;  ///< "eth0"
  sockaddr_storage addr;
};

/// Whether interface `name` passes a COLLIE_SOCKET_IFNAME-style filter: a comma list of prefixes; a leading
/// '^' excludes the listed ones; a leading '=' asks for exact names ('^=' both). Empty filter: everything
/// except loopback ("lo") and docker bridges ("docker"), loopback only as a last resort.
bool interfaceMatches(const std::string& filter, const std::string& name);
/// The local interface addresses that pass the filter (params: COLLIE_SOCKET_IFNAME, COLLIE_SOCKET_FAMILY),
/// best first. Falls back to loopback when nothing else exists and the filter is empty.
std::vector<InterfaceAddress> findInterfaces(const std::string& filter, const std::string& family);

/// The address this process should listen on and advertise (first of findInterfaces(params)).
sockaddr_storage defaultLocalAddress();

/// A listening TCP socket bound to `addr` (port 0: any free port). Returns the fd; `addr` gets the port.
int listenOn(sockaddr_storage& addr, int backlog = 1024);
/// Connects to addr, retrying refused/unreachable attempts with exponential backoff until `deadline` or
/// `retries` tries. Returns a blocking fd with TCP_NODELAY set. Throws SystemError/Timeout naming `what`.
/// `beforeRetry`, when set, runs before each retry and may throw to end them (e.g. the peer's process is gone).
/// `refusedLimit` > 0: that many refusals in a row throw RemoteError (nothing listens at an address the peer
/// published: its communicator or process is gone), where a listener is known to have been there.
/// `unansweredLimit` > 0: where a listener is known to have been there too, connecting that long with no answer at
/// all (no SYN-ACK and no refusal: the SYNs vanish, or the host has no route) throws RemoteError: the peer's host is
/// down or cut off (COLLIE_PEER_DEAD_TIMEOUT's rule for a connected peer, applied before the first connection). A
/// refusal is an answer: the host is up.
/// `stop`, when set, is looked at while waiting (every kStopLookMs): once true the wait throws InvalidUsage
/// ("aborted"), the way a communicator's abort ends a bootstrap still waiting for its root.
int connectWithRetry(const sockaddr_storage& addr, Deadline deadline, int retries, const std::string& what,
                     const std::function<void()>& beforeRetry = {}, int refusedLimit = 0,
                     std::chrono::milliseconds unansweredLimit = std::chrono::milliseconds(0),
                     const std::atomic<bool>* stop = nullptr);
/// Whether `addr` is a loopback address (127.0.0.0/8, ::1, or IPv4 loopback mapped into IPv6).
bool isLoopbackAddress(const sockaddr_storage& addr);
/// accept() with a deadline; returns -1 on timeout. Also fills *peer.
int acceptUntil(int listenFd, Deadline deadline, sockaddr_storage* peer);

/// Blocking exact-size I/O with a deadline. Throw RemoteError on EOF/reset and Timeout past the deadline;
/// `what` names the other side in the message. `stop`: as connectWithRetry's.
void sendAll(int fd, const void* buf, size_t bytes, Deadline deadline, const std::string& what,
             const std::atomic<bool>* stop = nullptr);
void recvAll(int fd, void* buf, size_t bytes, Deadline deadline, const std::string& what,
             const std::atomic<bool>* stop = nullptr);

/// How often a wait given a stop flag looks at it: the most an abort waits for a blocked bootstrap to notice.
constexpr int kStopLookMs = 20;

void setNonBlocking(int fd, bool on);
void setNoDelay(int fd);
/// Dead-peer detection on an idle connected TCP socket: keep-alive probes, set so that a peer that stops answering
/// (host down, link cut) makes the socket fail with ETIMEDOUT after about `ms` milliseconds. A live peer's kernel
/// answers the probes, however long its process does not call. ms <= 0 leaves the kernel's defaults (keep-alive
/// off). TCP_USER_TIMEOUT is deliberately not set: Linux applies it to zero-window probing too, so it would kill
/// the connection to a live peer that merely does not read for `ms` (a late rank). A socket with data outstanding
/// is watched with unansweredMs() instead.
void setDeadPeerTimeout(int fd, int64_t ms);
/// Milliseconds since the peer's kernel last acknowledged anything on `fd`, when something is waiting for its
/// answer (unacknowledged data, or window probes that went unanswered); -1 when nothing is (or TCP_INFO is
/// unavailable). A live peer that does not read still answers window probes, so this is -1 for it however long
/// it does not read. A peer that dies while its window is shut is seen at its second unanswered probe, which
/// Linux backs off exponentially (up to 2 minutes apart).
int64_t unansweredMs(int fd);
/// Larger kernel buffers for the data path.
void setBufferSizes(int fd, int bytes);

}  // namespace collie::base
