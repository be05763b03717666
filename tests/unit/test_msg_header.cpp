// The tcp message header check (transport/tcp/msg_header.hpp), a pure function: each way a header can differ from
// what the receiver posted gives its own error, a poison header gives back the record it carries, and any 48
// bytes decode without harm. Also the call fingerprints' words (core/call_fingerprint.hpp).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "algorithms/algorithms.hpp"
#include "core/call_fingerprint.hpp"
#include "transport/tcp/msg_header.hpp"

namespace collie::transport::tcp {
namespace {

Fingerprint fpOf(algorithms::Collective coll, size_t count, DataType type, ReduceOp op, int root, uint32_t call) {
  core::OpDesc d = core::makeOp(coll, nullptr, nullptr, count, type, op, root);
  return core::fingerprintOf(d, call, 0);
}

TEST(MsgHeader, MatchingHeaderPasses) {
  const Fingerprint fp = fpOf(algorithms::Collective::AllReduce, 1024, DataType::Float32, ReduceOp::Sum, 0, 17);
  const MsgHeader h = dataHeader(5, 4096, fp);
  EXPECT_NO_THROW(checkMsgHeader(decodeMsgHeader(&h, sizeof(h)), ExpectedMsg{5, 4096, fp}, 0, 1));
}

TEST(MsgHeader, DifferentCallIsAMismatchNamingBothSides) {
  const Fingerprint mine = fpOf(algorithms::Collective::AllReduce, 1024, DataType::Float32, ReduceOp::Sum, 0, 17);
  const Fingerprint theirs = fpOf(algorithms::Collective::Broadcast, 1024, DataType::Float32, ReduceOp::Sum, 1, 17);
  const MsgHeader h = dataHeader(5, 4096, theirs);
  try {
    checkMsgHeader(h, ExpectedMsg{5, 4096, mine}, 0, 1);
    FAIL() << "no error";
  } catch (const MismatchError& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
    EXPECT_EQ(e.record().rankA, 1);
    EXPECT_EQ(e.record().rankB, 0);
    EXPECT_EQ(e.record().a, theirs);
    EXPECT_EQ(e.record().b, mine);
    EXPECT_EQ(core::describeMismatch(e.record())
                  .rfind("mismatched calls: rank 0 called AllReduce(float32, sum, 1024) as call #17; rank 1 called "
                         "Broadcast(float32, 1024, root 1) as call #17",
                         0),
              0u)
        << core::describeMismatch(e.record());
  }
}

TEST(MsgHeader, SameCallOtherSizeOrOrderIsInternal) {
  const Fingerprint fp = fpOf(algorithms::Collective::AllGather, 8, DataType::Int32, ReduceOp::Sum, 0, 3);
  for (const MsgHeader& h : {dataHeader(5, 100, fp), dataHeader(6, 4096, fp)}) {
    try {
      checkMsgHeader(h, ExpectedMsg{5, 4096, fp}, 0, 1);
      FAIL() << "no error";
    } catch (const MismatchError&) {
      FAIL() << "a size or order error reported as a mismatch";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InternalError) << e.what();
    }
  }
  MsgHeader bad = dataHeader(5, 4096, fp);
  bad.magic = 0x12345678;
  try {
    checkMsgHeader(bad, ExpectedMsg{5, 4096, fp}, 0, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InternalError);
    EXPECT_NE(std::string(e.what()).find("corrupt tcp stream from peer 1"), std::string::npos) << e.what();
  }
}

TEST(MsgHeader, PoisonHeaderCarriesItsRecord) {
  MismatchRecord r;
  r.rankA = 2;
  r.rankB = 7;
  r.a = fpOf(algorithms::Collective::Reduce, 9, DataType::Float64, ReduceOp::Max, 2, 40);
  r.b = fpOf(algorithms::Collective::Reduce, 9, DataType::Float64, ReduceOp::Max, 7, 40);
  const MsgHeader h = poisonHeader(r);
  try {
    checkMsgHeader(h, ExpectedMsg{0, 8, Fingerprint{}}, 0, 3);
    FAIL() << "no error";
  } catch (const MismatchError& e) {
    EXPECT_EQ(e.record().rankA, 2);
    EXPECT_EQ(e.record().rankB, 7);
    EXPECT_EQ(e.record().a, r.a);
    EXPECT_EQ(e.record().b, r.b);
  }
}

TEST(MsgHeader, WrongLengthAndRandomBytesFailCleanly) {
  char bytes[sizeof(MsgHeader)] = {};
  EXPECT_THROW(decodeMsgHeader(bytes, sizeof(bytes) - 1), Error);
  std::mt19937_64 rng(7);
  const ExpectedMsg want{1, 64, Fingerprint{}};
  for (int i = 0; i < 2000; ++i) {
    for (char& c : bytes) c = static_cast<char>(rng());
    if (i % 3 == 0) std::memcpy(bytes, &kPoisonMagic, 4);
    if (i % 3 == 1) std::memcpy(bytes, &kMsgMagic, 4);
    try {
      checkMsgHeader(decodeMsgHeader(bytes, sizeof(bytes)), want, 0, 1);
    } catch (const MismatchError& e) {
      EXPECT_FALSE(core::describeMismatch(e.record()).empty());  // any record can be put in words
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InternalError);
    }
  }
}

TEST(CallFingerprint, SendAndMatchingRecvAgreeAndAreDescribedFromEachSide) {
  core::OpDesc send =
      core::makeOp(algorithms::Collective::Send, nullptr, nullptr, 8, DataType::Int32, ReduceOp::Sum, 1);
  core::OpDesc recv =
      core::makeOp(algorithms::Collective::Recv, nullptr, nullptr, 8, DataType::Int32, ReduceOp::Sum, 0);
  const Fingerprint s = core::fingerprintOf(send, 3, 0), r = core::fingerprintOf(recv, 3, 1);
  EXPECT_EQ(s, r);
  EXPECT_EQ(core::describeCall(s, 0, 1), "rank 0 called Send(int32, 8 to rank 1) as send #3 to rank 1");
  EXPECT_EQ(core::describeCall(r, 1, 0), "rank 1 called Recv(int32, 8 from rank 0) as receive #3 from rank 0");
  recv.type = DataType::Float32;
  EXPECT_NE(s, core::fingerprintOf(recv, 3, 1));
}

// The algorithm that runs a collective is part of its fingerprint (ranks that chose differently must not exchange
// messages), but not of its words, except in the mismatch it explains; a Reduce's root survives beside it.
TEST(CallFingerprint, TheAlgorithmIsPartOfACollectivesFingerprint) {
  core::OpDesc op =
      core::makeOp(algorithms::Collective::Reduce, nullptr, nullptr, 64, DataType::Float32, ReduceOp::Sum, 5);
  const Fingerprint ring = core::fingerprintOf(op, 2, 0, 0, static_cast<int>(algorithms::Algorithm::Ring));
  const Fingerprint tree = core::fingerprintOf(op, 2, 1, 0, static_cast<int>(algorithms::Algorithm::Tree));
  EXPECT_NE(ring, tree);
  EXPECT_EQ(core::describeCall(ring, 0, 1), "rank 0 called Reduce(float32, sum, 64, root 5) as call #2");
  const std::string why = core::describeMismatch(MismatchRecord{0, 1, ring, tree});
  EXPECT_NE(why.find("different algorithms"), std::string::npos) << why;
  EXPECT_NE(why.find("as call #2 by ring"), std::string::npos) << why;
  EXPECT_NE(why.find("as call #2 by tree"), std::string::npos) << why;
  op.barrier = true;
  op.coll = algorithms::Collective::AllReduce;
  EXPECT_EQ(core::describeCall(core::fingerprintOf(op, 4, 0), 0, 1), "rank 0 called Barrier() as call #4");
}

// A PreMulSum is its own op in the fingerprint (against a Sum it is a mismatch, named), and its factor is not: ranks
// pass different factors to one call.
TEST(CallFingerprint, PreMulSumIsItsOwnOpAndItsFactorIsNotPartOfTheCall) {
  const auto allReduce = [](const Reduction& op) {
    return core::fingerprintOf(
        core::makeOp(algorithms::Collective::AllReduce, nullptr, nullptr, 16, DataType::Float32, op, 0), 1, 0, 0,
        static_cast<int>(algorithms::Algorithm::Ring));
  };
  const Fingerprint half = allReduce(Reduction::preMulSum(0.5f)), two = allReduce(Reduction::preMulSum(2.0f));
  EXPECT_EQ(half, two);
  EXPECT_NE(half, allReduce(ReduceOp::Sum));
  EXPECT_EQ(core::describeCall(half, 0, 1), "rank 0 called AllReduce(float32, premulsum, 16) as call #1");
}

}  // namespace
}  // namespace collie::transport::tcp
