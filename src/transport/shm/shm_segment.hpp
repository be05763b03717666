// Shared memory of the shm transport: what lives in it (the ring of one direction of a peer pair, and one
// control line per rank) and how a segment is made.
//
// Segments are anonymous: a memfd (default) or a /dev/shm file unlinked right after shm_open
// (COLLIE_SHM_BACKING=devshm). Either way no name stays behind, so nothing is left in /dev/shm when a rank
// exits or is killed; the memory goes away when the last process that maps it unmaps it or dies. Peers get
// the segment's fd over the transport's unix socket (SCM_RIGHTS). Every segment is reserved in full
// (fallocate) when it is made, so a full tmpfs or an exhausted memory limit is a clear error at init, never a
// SIGBUS later.
//
// Ring layout (one per direction of each pair, owned and reserved by the receiving rank, on its NUMA node):
//   [0]    RingHeader      written once by the owner before the fd is handed over
//   [128]  ConsumerLine    head (slots consumed): written by the receiver only, read by the sender when the ring
//                          is full or a message sent by address awaits its copy
//   [256]  ProducerLine    the sender's closed flag: written by the sender only
//   [384]  ConsumerFlags   the receiver's closed and reading flags: written by the receiver only
//   [512]  slots           nslots x (64-byte SlotHeader + slotBytes payload); a message of up to 32 bytes is
//                          whole in its header's line
// The closed lines also carry a PoisonNote: the call mismatch that made a side close, for the other side to report.
// Words written by different sides, and hot words apart from flags read while idle, sit 128 bytes apart (a
// pair of lines, which x86 prefetches together).
// A slot is full when its header's seq equals its ticket + 1 (the producer's running slot count), written
// last with release; the receiver never clears it, since the next use of the slot has a larger ticket.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/handshake.hpp"

namespace collie::transport::shm {

constexpr uint32_t kRingMagic = 0x434c5352;     // "CLSR"
constexpr uint32_t kControlMagic = 0x434c5343;  // "CLSC"
constexpr uint32_t kLayoutVersion = 4;
/// Messages up to this size travel whole in the slot header's cache line (one line moves per message): 8-32 B
/// AllReduces, whose payload took a second line (0.2-0.3 us more per call where lines cross dies) while it held 24.
constexpr size_t kInlineBytes = 32;
/// SlotHeader::bytes of a slot whose message the receiver copies straight from the sender's address.
constexpr uint32_t kDirectSlot = UINT32_MAX;
/// Set in SlotHeader::bytes of a slot that holds a whole message of up to kInlineBytes in inl[] (never with
/// kDirectSlot's value: inline sizes are small).
constexpr uint32_t kInlineSlot = 0x80000000u;

struct alignas(64) SlotHeader {
  std::atomic<uint64_t> seq;  ///< ticket + 1 once full
  Fingerprint fp;             ///< the sender's call (transport/fingerprint.hpp), checked by the receiver
  uint32_t msgSeq;            ///< the message's number on this ring
  uint32_t bytes;             ///< payload bytes in this slot, kInlineSlot | size (inline), or kDirectSlot
  union {
    char inl[kInlineBytes];  ///< kInlineSlot: the whole message
    struct {
      uint64_t msgBytes;  ///< size of the whole message (one or more slots, or kDirectSlot)
      uint64_t addr;      ///< kDirectSlot: the message in the sender's address space
    } big;
  };
  bool isInline() const { return bytes != kDirectSlot && (bytes & kInlineSlot) != 0; }
  /// Size of the whole message this slot holds (all of it, or a part).
  uint64_t messageBytes() const { return isInline() ? bytes & ~kInlineSlot : big.msgBytes; }
};
static_assert(sizeof(SlotHeader) == 64 && offsetof(SlotHeader, inl) + kInlineBytes == 64);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "atomics in shared memory must be lock-free (address-free)");

struct RingHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t slots;      ///< a power of two
  uint32_t slotBytes;  ///< a multiple of 64
  uint64_t bytes;      ///< size of the whole segment
  int32_t owner;       ///< rank that receives from this ring
  int32_t writer;      ///< rank that sends into it
};

/// A call mismatch passed to the peer by a side that closes (transport/fingerprint.hpp): the record is written
/// first, then `set` (release), then the side's closed flag.
struct PoisonNote {
  std::atomic<uint32_t> set;
  MismatchRecord record;
};

struct ConsumerLine {
  std::atomic<uint64_t> head;
};

struct ConsumerFlags {
  std::atomic<uint32_t> closed;
  /// 1 while the receiver copies a message straight from the sender's buffer (kSlotDirect). A sender that
  /// closes (its call failed, its buffers may go away) first sets ProducerLine::closed, then waits for this to
  /// be 0; the receiver sets it, then checks closed, so it never reads a buffer after the sender gave up on it.
  std::atomic<uint32_t> reading;
  PoisonNote poison;  ///< set by a receiver that closes because of a call mismatch
};

struct ProducerLine {
  std::atomic<uint32_t> closed;
  PoisonNote poison;  ///< set by a sender that closes because of a call mismatch
};

/// One per rank (per shm transport): what its peers read before deciding to wake it.
struct RankControl {
  uint32_t magic;
  int32_t rank;
  alignas(128) std::atomic<uint32_t> sleeping;  ///< 1 while the rank sleeps (or is about to) in its poller
};

constexpr size_t kConsumerOffset = 128;
constexpr size_t kProducerOffset = 256;
constexpr size_t kConsumerFlagsOffset = 384;
constexpr size_t kSlotsOffset = 512;
constexpr size_t kControlBytes = 4096;
static_assert(sizeof(ConsumerFlags) <= kSlotsOffset - kConsumerFlagsOffset && sizeof(ProducerLine) <= 128);

/// Bytes of a ring segment (rounded up to whole pages).
size_t ringBytes(uint32_t slots, uint32_t slotBytes);

/// A view of a mapped ring.
struct RingView {
  RingHeader* header = nullptr;
  ConsumerLine* consumer = nullptr;
  ProducerLine* producer = nullptr;
  ConsumerFlags* flags = nullptr;
  char* slots = nullptr;
  uint64_t mask = 0;  ///< slots - 1
  size_t stride = 0;  ///< 64 + slotBytes
  uint32_t slotBytes = 0;

  static RingView of(void* base);
  SlotHeader* slot(uint64_t ticket) const {
    return reinterpret_cast<SlotHeader*>(slots + static_cast<size_t>(ticket & mask) * stride);
  }
  static char* payload(SlotHeader* s) { return reinterpret_cast<char*>(s + 1); }
};

/// A mapped segment; unmapped on destruction. Move-only. A process maps each segment once: mapSegment() of a
/// segment this process already maps (ranks that are threads of one process) shares that mapping, counted.
class Segment {
 public:
  Segment() = default;
  Segment(void* addr, size_t bytes) : addr_(addr), bytes_(bytes) {}
  ~Segment() { reset(); }
  Segment(Segment&& o) noexcept : addr_(o.addr_), bytes_(o.bytes_) { o.addr_ = nullptr; }
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  void* data() const { return addr_; }
  size_t size() const { return bytes_; }
  explicit operator bool() const { return addr_ != nullptr; }
  void reset();

 private:
  void* addr_ = nullptr;
  size_t bytes_ = 0;
};

enum class Backing { Memfd, DevShm };

/// Parses COLLIE_SHM_BACKING ("memfd" or "devshm"); throws InvalidArgument naming the variable otherwise.
Backing parseBacking(const std::string& text);

/// What a failed reservation should say: who needs the memory and how much in all.
struct SegmentPurpose {
  int rank = 0;
  std::string what;       ///< e.g. "the ring from rank 3"
  size_t totalBytes = 0;  ///< all the shared memory this rank needs for this connect
  int peers = 0;
};

/// Creates a segment of `bytes`, places it on `numaNode` (when >= 0 and the machine has several), reserves it
/// in full and maps it read-write into *out. Returns its fd (for the peers). Fails with SystemError saying how
/// much was needed and how to fix it when the memory cannot be reserved.
UniqueFd createSegment(Backing backing, size_t bytes, int numaNode, const SegmentPurpose& purpose, Segment* out);
/// Checks that /dev/shm has room for `purpose.totalBytes` (devshm backing only); fails like createSegment.
void checkDevShmRoom(const SegmentPurpose& purpose);
/// Maps a peer's segment; checks that the fd holds at least `bytes`.
Segment mapSegment(int fd, size_t bytes, const std::string& what);

}  // namespace collie::transport::shm
