// The tuner's decisions with fixed costs (src/core/tuner.hpp): latency-bound calls go to the tree or halving-
// doubling, bandwidth-bound calls to the ring or halving-doubling as the model says, folding penalises
// halving-doubling for non-powers of two, COLLIE_ALGO's grammar forces and excludes, and the tuner's choice is
// within reach of the best algorithm the simulator finds. Plus the tuning file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "algorithms/algorithms.hpp"
#include "core/tuner.hpp"
#include "sim/simulator.hpp"

namespace collie::core {
namespace {

using algorithms::Algorithm;
using algorithms::Collective;

// A 10 GB/s network with 10 us hops and a 20 GB/s host reduction.
CostModel fixedModel() {
  CostModel m;
  m.transport = "tcp";
  m.link = {10e-6, 1e-10};
  m.gamma = 5e-11;
  return m;
}

Algorithm pick(Collective coll, int n, size_t bytes, const std::string& spec = "") {
  Tuner t(fixedModel(), AlgoSelection::parse(spec));
  return t.choose(coll, n, bytes).algorithm;
}

// Direct AllReduce (one round, n-1 whole-buffer messages) wins only where latency is everything: tiny messages on
// few ranks. At scale its per-message cost loses to log-depth algorithms, and with large messages its bytes do.
TEST(Tuner, DirectOnlyForTinyMessagesOnFewRanks) {
  for (int n : {2, 3, 4, 8}) EXPECT_EQ(pick(Collective::AllReduce, n, 8), Algorithm::Direct) << n << " ranks";
  for (int n : {64, 1000}) EXPECT_NE(pick(Collective::AllReduce, n, 8), Algorithm::Direct) << n << " ranks";
  for (int n : {2, 3, 8})
    EXPECT_NE(pick(Collective::AllReduce, n, size_t{1} << 20), Algorithm::Direct) << n << " ranks, 1 MiB";
}

// One host over tcp with more ranks than CPUs, costs as rank 0 measured them on 2 CPUs (its alpha varies from
// 3.8 to 10.6 us between inits, gap 3.8-4.2 us): small AllReduces go to halving-doubling, which runs them as
// recursive doubling (log2 p rounds of one message against direct's n-1 messages a rank, which queue for the CPUs:
// 4 ranks, 8 B: 22-30 us against 37-54). The same over ucx (UCX over its tcp, 4 ranks, 8-512 B: 71-76 us against
// direct's 103-207). Over shm direct stays ahead and keeps them; so do 2 and 3 ranks.
TEST(Tuner, OneHostNetworkSmallAllReduceIsRecursiveDoubling) {
  auto model = [](const char* transport, double alphaUs, double gapUs, int nranks) {
    CostModel m;
    m.transport = transport;
    m.link = {alphaUs * 1e-6, 0.89e-9, gapUs * 1e-6};
    m.gamma = 0.04e-9;
    m.shareCpus(nranks / 2.0);  // 2 CPUs
    return m;
  };
  for (const char* transport : {"tcp", "ucx"}) {
    for (double alpha : {3.8, 10.6}) {
      for (int n : {4, 8}) {
        for (size_t bytes : {size_t{8}, size_t{32}, size_t{512}, size_t{2048}}) {
          const Tuner net(model(transport, alpha, 3.9, n), AlgoSelection{});
          EXPECT_EQ(net.choose(Collective::AllReduce, n, bytes).algorithm, Algorithm::HalvingDoubling)
              << transport << ", " << n << " ranks, " << bytes << " B, alpha " << alpha;
          EXPECT_LT(net.cost(Collective::AllReduce, Algorithm::HalvingDoubling, n, bytes),
                    net.cost(Collective::AllReduce, Algorithm::Direct, n, bytes) * 0.95);
        }
        // Above 2 KiB rhd halves the buffer again and is priced so: 2 log2 p rounds (4 ranks: direct is cheaper).
        const Tuner net(model(transport, alpha, 3.9, n), AlgoSelection{});
        EXPECT_GT(net.cost(Collective::AllReduce, Algorithm::HalvingDoubling, n, 4096),
                  net.cost(Collective::AllReduce, Algorithm::HalvingDoubling, n, 2048) * 1.4);
        if (n == 4) {
          EXPECT_EQ(net.choose(Collective::AllReduce, n, 4096).algorithm, Algorithm::Direct) << transport;
        }
      }
      for (int n : {2, 3})
        EXPECT_EQ(Tuner(model(transport, alpha, 3.9, n), AlgoSelection{}).choose(Collective::AllReduce, n, 8).algorithm,
                  Algorithm::Direct)
            << transport << ", " << n << " ranks";
    }
  }
  const CostModel shm = [] {  // measured over shm, 4 ranks on 2 CPUs
    CostModel m;
    m.transport = "shm";
    m.link = {3.54e-6, 0.2e-9, 0.83e-6};
    m.gamma = 0.036e-9;
    m.shareCpus(2);
    return m;
  }();
  for (size_t bytes : {size_t{8}, size_t{2048}})
    EXPECT_EQ(Tuner(shm, AlgoSelection{}).choose(Collective::AllReduce, 4, bytes).algorithm, Algorithm::Direct);
}

TEST(Tuner, SmallMessagesAvoidTheRingAtScale) {
  for (int n : {16, 64, 96, 1000, 4096}) {
    for (size_t bytes : {size_t{8}, size_t{1024}, size_t{16384}}) {
      EXPECT_NE(pick(Collective::AllReduce, n, bytes), Algorithm::Ring) << n << " ranks, " << bytes << " B";
      EXPECT_EQ(pick(Collective::Broadcast, n, bytes), Algorithm::Tree) << n << " ranks, " << bytes << " B";
      EXPECT_EQ(pick(Collective::Reduce, n, bytes), Algorithm::Tree) << n << " ranks, " << bytes << " B";
      EXPECT_EQ(pick(Collective::AllGather, n, bytes / n + 1), Algorithm::HalvingDoubling) << n << " ranks";
    }
  }
}

TEST(Tuner, LargeMessagesAvoidFoldingAndTreeFill) {
  // Non-powers of two: halving-doubling moves the extra ranks' whole buffers, so the ring wins large calls.
  for (int n : {3, 6, 12, 96}) {
    EXPECT_EQ(pick(Collective::AllReduce, n, size_t{256} << 20), Algorithm::Ring) << n;
    EXPECT_EQ(pick(Collective::AllGather, n, size_t{16} << 20), Algorithm::Ring) << n;
    EXPECT_EQ(pick(Collective::ReduceScatter, n, size_t{16} << 20), Algorithm::Ring) << n;
  }
  // A chain broadcast streams the buffer once with the least pipeline fill at small n.
  EXPECT_EQ(pick(Collective::Broadcast, 4, size_t{256} << 20), Algorithm::Ring);
  // Powers of two: halving-doubling sends as few bytes as the ring in far fewer steps.
  EXPECT_EQ(pick(Collective::AllReduce, 64, size_t{256} << 20), Algorithm::HalvingDoubling);
}

TEST(Tuner, PointToPointAndOneRank) {
  EXPECT_EQ(pick(Collective::AllToAll, 8, 1 << 20), Algorithm::Direct);
  EXPECT_EQ(pick(Collective::Send, 2, 1 << 20), Algorithm::Direct);
  EXPECT_EQ(pick(Collective::AllToAll, 8, 1 << 20, "tree"), Algorithm::Direct);  // nothing else implements it
  EXPECT_EQ(pick(Collective::AllReduce, 1, 1 << 20), Algorithm::Ring);
}

TEST(Tuner, SlowReductionFavoursFewerReducedBytes) {
  CostModel m = fixedModel();
  m.gamma = 1e-8;  // 100 MB/s: reductions dominate; the ring reduces (n-1)/n of the buffer, the tree all of it
  Tuner t(m, AlgoSelection{});
  EXPECT_NE(t.choose(Collective::AllReduce, 6, size_t{64} << 20).algorithm, Algorithm::Tree);
}

TEST(Tuner, ForcedAndExcluded) {
  for (size_t bytes : {size_t{8}, size_t{1} << 20, size_t{256} << 20}) {
    EXPECT_EQ(pick(Collective::AllReduce, 8, bytes, "tree"), Algorithm::Tree);
    EXPECT_EQ(pick(Collective::AllReduce, 8, bytes, "RING"), Algorithm::Ring);
    EXPECT_EQ(pick(Collective::AllReduce, 8, bytes, "allreduce:rhd;broadcast:tree"), Algorithm::HalvingDoubling);
    EXPECT_EQ(pick(Collective::Broadcast, 8, bytes, "allreduce:rhd;broadcast:tree"), Algorithm::Tree);
    EXPECT_NE(pick(Collective::AllReduce, 8, bytes, "^ring"), Algorithm::Ring);
    EXPECT_NE(pick(Collective::AllReduce, 8, bytes, "^ring,rhd"), Algorithm::HalvingDoubling);
    EXPECT_EQ(pick(Collective::AllReduce, 8, bytes, "^ring,rhd,direct"), Algorithm::Tree);
    EXPECT_EQ(pick(Collective::AllReduce, 8, bytes, "direct"), Algorithm::Direct);
    // A global list with a per-collective exception.
    EXPECT_EQ(pick(Collective::AllReduce, 8, bytes, "ring;allreduce:tree"), Algorithm::Tree);
    EXPECT_EQ(pick(Collective::Reduce, 8, bytes, "ring;allreduce:tree"), Algorithm::Ring);
  }
  // Forcing an algorithm that does not implement the collective leaves the choice free.
  EXPECT_EQ(pick(Collective::AllGather, 8, 8, "tree"), pick(Collective::AllGather, 8, 8));
  EXPECT_EQ(pick(Collective::Broadcast, 8, 8, "rhd"), pick(Collective::Broadcast, 8, 8));
}

TEST(Tuner, CollieAlgoGrammarErrorsNameTheVariable) {
  for (const char* bad : {"trees", "ring,", "allreduce:bogus", "gather:ring", "^"}) {
    try {
      AlgoSelection::parse(bad);
      ADD_FAILURE() << "'" << bad << "' must be rejected";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("COLLIE_ALGO"), std::string::npos) << e.what();
    }
  }
}

constexpr Collective kColls[] = {Collective::AllReduce, Collective::Broadcast,     Collective::Reduce,
                                 Collective::AllGather, Collective::ReduceScatter, Collective::AllToAll,
                                 Collective::Send,      Collective::Recv};

// The algorithms `sel` allows for `coll`, as a string of names ("ring,tree"), in kAllAlgorithms order.
std::string allowedList(const AlgoSelection& sel, Collective coll) {
  std::string out;
  for (Algorithm a : algorithms::kAllAlgorithms)
    if (sel.allowed(coll, a)) out += (out.empty() ? "" : ",") + std::string(algorithms::algorithmName(a));
  return out;
}

TEST(Tuner, CollieAlgoGrammarParsesToTheSelection) {
  const std::string all = "ring,direct,tree,rhd,hier";
  // Empty: everything everywhere.
  AlgoSelection none = AlgoSelection::parse("");
  for (Collective c : kColls) EXPECT_EQ(allowedList(none, c), all) << algorithms::collectiveName(c);
  // Per collective, spaces, '_' and case ignored; unnamed collectives stay free.
  AlgoSelection per = AlgoSelection::parse(" allreduce : tree , RING ; reduce_scatter:rhd ");
  EXPECT_EQ(allowedList(per, Collective::AllReduce), "ring,tree");
  EXPECT_EQ(allowedList(per, Collective::ReduceScatter), "rhd");
  for (Collective c : {Collective::Broadcast, Collective::Reduce, Collective::AllGather, Collective::AllToAll})
    EXPECT_EQ(allowedList(per, c), all) << algorithms::collectiveName(c);
  // The long name of rhd, global.
  AlgoSelection hd = AlgoSelection::parse("halving_doubling");
  for (Collective c : kColls) EXPECT_EQ(allowedList(hd, c), "rhd") << algorithms::collectiveName(c);
  // Negation, global with a per-collective exception.
  AlgoSelection neg = AlgoSelection::parse("^tree,direct;broadcast:tree");
  EXPECT_EQ(allowedList(neg, Collective::AllReduce), "ring,rhd,hier");
  EXPECT_EQ(allowedList(neg, Collective::Reduce), "ring,rhd,hier");
  EXPECT_EQ(allowedList(neg, Collective::Broadcast), "tree");
  EXPECT_EQ(neg.spec(), "^tree,direct;broadcast:tree");
  // What the tuner then runs, at every size: the one allowed algorithm, or the best of the allowed ones.
  for (size_t bytes : {size_t{4}, size_t{64} << 10, size_t{64} << 20}) {
    Tuner t(fixedModel(), per);
    EXPECT_EQ(t.choose(Collective::ReduceScatter, 8, bytes).algorithm, Algorithm::HalvingDoubling) << bytes;
    const Algorithm ar = t.choose(Collective::AllReduce, 8, bytes).algorithm;
    EXPECT_TRUE(ar == Algorithm::Ring || ar == Algorithm::Tree) << bytes << ": " << algorithms::algorithmName(ar);
    Tuner tn(fixedModel(), neg);
    EXPECT_EQ(tn.choose(Collective::Broadcast, 8, bytes).algorithm, Algorithm::Tree) << bytes;
    const Algorithm r = tn.choose(Collective::Reduce, 8, bytes).algorithm;
    EXPECT_EQ(r, Algorithm::Ring) << bytes << ": rhd does not implement Reduce, tree and direct are excluded";
  }
}

// The tuner picks only pairs algorithms::supports() allows, whatever COLLIE_ALGO forces: a forced algorithm that
// does not implement the collective falls back to the supported ones (as NCCL_ALGO does), never to a builder.
TEST(Tuner, NeverChoosesAnUnsupportedPair) {
  for (const char* spec : {"", "ring", "tree", "rhd", "direct", "^ring,tree,rhd,direct", "allreduce:tree;send:ring"}) {
    Tuner t(fixedModel(), AlgoSelection::parse(spec));
    for (Collective c : kColls) {
      for (int n : {1, 2, 3, 8, 64}) {
        for (size_t bytes : {size_t{0}, size_t{8}, size_t{1} << 20, size_t{256} << 20}) {
          const Algorithm a = t.choose(c, n, bytes).algorithm;
          EXPECT_TRUE(algorithms::supports(a, c))
              << "COLLIE_ALGO='" << spec << "' " << algorithms::collectiveName(c) << " " << n << " ranks " << bytes
              << " B: " << algorithms::algorithmName(a);
          if (std::string(spec).size() > 0 && std::string(spec).find_first_of("^;") == std::string::npos) {
            Algorithm forced;
            ASSERT_TRUE(algorithms::parseAlgorithm(spec, &forced));
            if (algorithms::supports(forced, c)) {
              EXPECT_EQ(a, forced) << spec << " " << algorithms::collectiveName(c);
            }
          }
        }
      }
    }
  }
}

TEST(Tuner, SlicingDependsOnAlgorithmAndSize) {
  size_t ring = 0, tree = 0, small = 0;
  int inflight = 0;
  chooseSlicing(Collective::AllReduce, Algorithm::Ring, "tcp", 8, size_t{64} << 20, &ring, &inflight);
  chooseSlicing(Collective::AllReduce, Algorithm::Tree, "tcp", 8, size_t{64} << 20, &tree, &inflight);
  chooseSlicing(Collective::AllReduce, Algorithm::Ring, "tcp", 8, 4096, &small, &inflight);
  EXPECT_GT(inflight, 0);
  EXPECT_LT(tree, ring);  // the tree's pipeline is deeper
  EXPECT_LT(small, ring);
  EXPECT_GE(small, size_t{4096});
}

// Two ranks over tcp cut their ring's halves of up to 2 MiB into 128 KiB slices (the 256 KiB send burst); other
// shapes and larger messages keep the general rule.
TEST(Tuner, TwoRankTcpRingSlicesAre128KiBUpTo4MiB) {
  auto slice = [](const char* transport, int n, size_t bytes) {
    size_t s = 0;
    int inflight = 0;
    chooseSlicing(Collective::AllReduce, Algorithm::Ring, transport, n, bytes, &s, &inflight);
    return s;
  };
  EXPECT_EQ(slice("tcp", 2, size_t{2} << 20), size_t{128} << 10);
  EXPECT_EQ(slice("tcp", 2, size_t{4} << 20), size_t{128} << 10);
  EXPECT_EQ(slice("tcp", 2, size_t{8} << 20), size_t{1} << 20);  // the general rule's cap
  EXPECT_EQ(slice("shm", 2, size_t{4} << 20), size_t{512} << 10);
  EXPECT_EQ(slice("tcp", 4, size_t{4} << 20), size_t{256} << 10);
}

// The tuner's pick, simulated, is close to the best simulated algorithm (the simulator runs the real schedules
// with the same alpha-beta-gamma costs, pipelining and port contention included).
TEST(Tuner, ChoiceIsNearTheSimulatedBest) {
  const CostModel m = fixedModel();
  Tuner t(m, AlgoSelection{});
  for (int n : {4, 6, 8, 24, 64}) {
    for (size_t bytes : {size_t{64}, size_t{64} << 10, size_t{4} << 20}) {
      double best = 0, chosen = 0;
      const Algorithm pickAlgo = t.choose(Collective::AllReduce, n, bytes).algorithm;
      for (Algorithm a : {Algorithm::Ring, Algorithm::Tree, Algorithm::HalvingDoubling}) {
        sim::SimOptions o;
        o.coll = Collective::AllReduce;
        o.algo = a;
        o.nranks = n;
        o.count = bytes / 4;
        o.type = DataType::Float32;
        o.checkData = false;
        o.cost = {m.link.alpha, m.link.beta, m.gamma, 0};
        int inflight = 0;
        chooseSlicing(o.coll, a, "tcp", n, bytes, &o.sliceBytes, &inflight);
        o.slicesInFlight = inflight;
        sim::SimResult r = sim::simulate(o);
        ASSERT_TRUE(r.ok) << r.error;
        if (best == 0 || r.seconds < best) best = r.seconds;
        if (a == pickAlgo) chosen = r.seconds;
      }
      EXPECT_LE(chosen, 1.25 * best) << n << " ranks, " << bytes << " B: picked "
                                     << algorithms::algorithmName(pickAlgo);
    }
  }
}

TEST(TuneFile, RoundTripsAndRejectsGarbage) {
  char path[] = "/tmp/collie_tune_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  MeasuredCosts in;
  in.set("tcp", {25e-6, 4e-10, 6e-6});
  in.set("shm", {2e-6, 1e-10});  // gap unknown: written without gap_us
  in.gamma = 8e-11;
  writeTuneFile(path, in);
  MeasuredCosts out;
  ASSERT_TRUE(readTuneFile(path, &out));
  ASSERT_NE(out.find("tcp"), nullptr);
  EXPECT_NEAR(out.find("tcp")->alpha, 25e-6, 1e-9);
  EXPECT_NEAR(out.find("tcp")->gap, 6e-6, 1e-9);
  EXPECT_NEAR(out.find("shm")->beta, 1e-10, 1e-14);
  EXPECT_EQ(out.find("shm")->gap, 0);
  MeasuredCosts parsed;  // gap_us is optional, and only after beta
  parseTuneText("tcp alpha_us=20 beta_ns_per_byte=6 gap_us=6.5\nshm alpha_us=3 beta_ns_per_byte=0.3\n", "t", &parsed);
  EXPECT_NEAR(parsed.find("tcp")->gap, 6.5e-6, 1e-12);
  EXPECT_EQ(parsed.find("shm")->gap, 0);
  for (const char* bad :
       {"tcp alpha_us=20 beta_ns_per_byte=6 gap_us=x\n", "tcp alpha_us=20 beta_ns_per_byte=6 gap_us=1 z\n",
        "tcp alpha_us=20 beta_ns_per_byte=6 gap_us=-1\n", "tcp alpha_us=20 beta_ns_per_byte=6 gap=1\n"})
    EXPECT_THROW(parseTuneText(bad, "t", &parsed), Error) << bad;
  EXPECT_NEAR(out.gamma, 8e-11, 1e-14);
  // The model of a communicator on both kinds is limited by the slower one.
  CostModel both = out.modelFor({"shm", "tcp"});
  EXPECT_EQ(both.transport, "tcp");
  EXPECT_NEAR(both.link.alpha, 25e-6, 1e-9);
  {
    std::ofstream f(path);
    f << "# comment\ntcp alpha_us=1 beta_ns_per_byte=oops\n";
  }
  EXPECT_THROW(readTuneFile(path, &out), Error);
  unlink(path);
  EXPECT_FALSE(readTuneFile(path, &out));
}

// What the tune file's parser used to take and no longer does (found writing its fuzz harness): an infinite cost
// (every estimate became inf), text after the numbers, and a NUL byte that hid the rest of its line. A refused file
// changes nothing, even when earlier lines were good.
TEST(TuneFile, RefusesInfiniteCostsTrailingTextAndNulAndIsAllOrNothing) {
  const std::string bad[] = {
      "tcp alpha_us=inf beta_ns_per_byte=1\n", "reduce gamma_ns_per_byte=INF\n",
      "tcp alpha_us=nan beta_ns_per_byte=1\n", "tcp alpha_us=1 beta_ns_per_byte=2 junk\n",
      "reduce gamma_ns_per_byte=1 2\n",        std::string("tcp alpha_us=1 beta_ns_per_byte=2\0x\n", 36)};
  for (const std::string& text : bad) {
    MeasuredCosts costs;
    costs.set("shm", {1e-6, 1e-10});
    try {
      parseTuneText("shm alpha_us=9 beta_ns_per_byte=9\n" + text, "t.tune", &costs);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("COLLIE_TUNE_FILE: t.tune:2: expected"), std::string::npos) << e.what();
    }
    ASSERT_EQ(costs.links.size(), 1u);
    EXPECT_EQ(costs.links[0].second.alpha, 1e-6) << "a refused file changed the costs";
  }
  MeasuredCosts ok;
  parseTuneText("  tcp alpha_us=1.5 beta_ns_per_byte=0.25  # note\r\n\nreduce gamma_ns_per_byte=0.5", "t", &ok);
  ASSERT_NE(ok.find("tcp"), nullptr);
  EXPECT_DOUBLE_EQ(ok.find("tcp")->alpha, 1.5e-6);
  EXPECT_DOUBLE_EQ(ok.gamma, 0.5e-9);
}

}  // namespace
}  // namespace collie::core
