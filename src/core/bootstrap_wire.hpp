// The bytes the bootstrap exchanges (see bootstrap.hpp for the protocol), as pure functions: encoding, and parsing
// that checks everything a stranger or a broken root could get wrong. A parser reads only the bytes it is given
// and throws collie::Error (RemoteError: the bytes came from another process) saying what is wrong.
//
// Layout (host byte order: every rank of a job runs the same build on the same architecture):
//   hello (rank -> root, kBootstrapHelloBytes):  magic u32 | secret[16] | rank i32 | nranks i32 | PeerInfo
//                                                 | AgreedSettings
//   reply (root -> rank):  magic u32 | status i32 | count i32 | message[200]      (kBootstrapReplyHeaderBytes)
//                          then, when status is Success, `count` PeerInfo: those of the rank's rootAnswerRanks
//                          (bootstrap_plan.hpp), in that order
// The secret is not checked here: the root compares it (in constant time) with its own.
#pragma once

#include <array>
#include <collie/collie.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/transport.hpp"

namespace collie::core {

/// 03: AgreedSettings carries cardDirectory; 02: the hello carries AgreedSettings; 01: PeerInfo of 96 bytes
constexpr uint32_t kBootstrapMagic = 0xc011eb03;

/// The settings that change which messages ranks exchange, so that ranks whose values differ would fail later
/// without naming them (a size mismatch at the first call for COLLIE_SLICE_BYTES, one in init's table gather for
/// COLLIE_INIT_CHUNK) or wait until the timeout (an eager rank for peers that never dial it). Each rank sends its
/// own in its hello and the root refuses every rank of a job whose ranks differ, naming the variable and two ranks.
/// (COLLIE_SOCKETS_PER_PEER and COLLIE_STRIPE_MIN_BYTES matter only between tcp peers: their handshake compares
/// them; COLLIE_ALGO and the tuner's inputs: every call's fingerprint carries the algorithm.)
struct AgreedSettings {
  int64_t sliceBytes = 0;     ///< COLLIE_SLICE_BYTES (0: the tuner's)
  int64_t initChunk = 0;      ///< COLLIE_INIT_CHUNK (0: the default)
  int64_t connectEager = 0;   ///< 1: this rank connects every pair at init (COLLIE_CONNECT, the config, a transport)
  int64_t cardDirectory = 0;  ///< 1: COLLIE_PEER_CARDS=directory (the root's answer and the all-gather differ)
};
static_assert(sizeof(AgreedSettings) == 32, "AgreedSettings travels as bytes: no padding");

/// "" when `a` (rank `rankA`'s) and `b` (rank `rankB`'s) agree, else which setting differs and both values.
std::string describeSettingsDifference(const AgreedSettings& a, int rankA, const AgreedSettings& b, int rankB);

/// What a rank tells the root.
struct BootstrapHello {
  std::array<uint8_t, 16> secret{};
  int32_t rank = -1;
  int32_t nranks = 0;
  transport::PeerInfo info;  ///< info.rank == rank
  AgreedSettings settings;
};

/// What the root answers: a refusal (status and message) or the PeerInfo of the rank's rootAnswerRanks.
struct BootstrapReply {
  ErrorCode status = ErrorCode::Success;
  std::string message;                     ///< why, when status is not Success (at most kBootstrapMessageBytes - 1)
  std::vector<transport::PeerInfo> table;  ///< when Success: rootAnswerRanks(rank, nranks, ...), in that order
};

constexpr size_t kBootstrapMessageBytes = 200;
constexpr size_t kBootstrapHelloBytes = 4 + 16 + 4 + 4 + sizeof(transport::PeerInfo) + sizeof(AgreedSettings);
constexpr size_t kBootstrapReplyHeaderBytes = 4 + 4 + 4 + kBootstrapMessageBytes;

std::vector<uint8_t> encodeBootstrapHello(const BootstrapHello& hello);
/// Checks size, magic, rank in [0, nranks), nranks >= 1, the PeerInfo (its rank, address lengths) and the settings
/// (none negative, the connect mode 0 or 1). Throws RemoteError naming the first problem.
BootstrapHello parseBootstrapHello(const uint8_t* data, size_t size);

std::vector<uint8_t> encodeBootstrapReply(const BootstrapReply& reply);
/// The size of the whole reply whose first kBootstrapReplyHeaderBytes are `header` (`size` of them given), for a
/// rank that expects the entries of `ranks` (rootAnswerRanks). Throws RemoteError when the header is not such a
/// reply.
size_t bootstrapReplyBytes(const uint8_t* header, size_t size, const std::vector<int>& ranks);
/// Checks size, magic, status (a known code), the count (ranks.size() on success, 0 on a refusal) and every table
/// entry (entry i is rank ranks[i], each PeerInfo as in parseBootstrapHello). Throws RemoteError naming the first
/// problem.
BootstrapReply parseBootstrapReply(const uint8_t* data, size_t size, const std::vector<int>& ranks);

}  // namespace collie::core
