// collie::ddp::DistributedDataParallel (include/collie/torch_ddp.hpp) on LibTorch, every rank a thread
// (ThreadLauncher). The claim under test: N ranks with batch B each end with the same parameters as one
// process with batch N*B (SGD and Adam, 20 steps, float32, within 1e-5 relative), for N in {2, 3, 4}, and
// all ranks end bit-identical. Also: no_sync accumulation, the bucket rebuild (identical on all ranks) for a
// model whose gradients become ready in neither registration order nor its reverse, unused parameters (the
// error, find-unused mode), a parameter whose accumulator runs without a gradient, fp16/bf16 compression within
// their tolerance, gradient-as-bucket-view.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <collie/torch_ddp.hpp>
#include <mutex>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "common/launcher.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;
using ddp::DdpOptions;
using ddp::DistributedDataParallel;

Options opts() {
  Options o;
  o.timeout = 120s;
  o.name = "ddp";
  return o;
}

constexpr int64_t kIn = 16, kHidden = 64, kOut = 8, kBatch = 8;
constexpr int kSteps = 20;

// Registered out of the order forward uses the layers (the output layer first), so gradients become ready in
// an order that is neither registration order nor its reverse: head, then l2, then l1. `extra` takes part only
// when useExtra is set (unused-parameter tests).
struct NetImpl : torch::nn::Module {
  explicit NetImpl(bool withExtra = false) {
    head = register_module("head", torch::nn::Linear(kHidden, kOut));
    l1 = register_module("l1", torch::nn::Linear(kIn, kHidden));
    l2 = register_module("l2", torch::nn::Linear(kHidden, kHidden));
    if (withExtra) extra = register_module("extra", torch::nn::Linear(kHidden, kHidden));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::tanh(l1->forward(x));
    x = torch::tanh(l2->forward(x));
    if (useExtra && extra) x = x + torch::tanh(extra->forward(x));
    return head->forward(x);
  }
  torch::nn::Linear head{nullptr}, l1{nullptr}, l2{nullptr}, extra{nullptr};
  bool useExtra = false;
};
TORCH_MODULE(Net);

// The data of one step for all ranks: N*B inputs and regression targets, generated once.
struct Data {
  std::vector<torch::Tensor> x, y;  // per step: [rows, kIn], [rows, kOut]
};

Data makeData(int64_t rows, int steps, uint64_t seed) {
  torch::manual_seed(seed);
  Data d;
  auto w = torch::randn({kIn, kOut});
  for (int s = 0; s < steps; ++s) {
    auto x = torch::randn({rows, kIn});
    d.x.push_back(x);
    d.y.push_back(torch::tanh(x.matmul(w)) + 0.1 * torch::randn({rows, kOut}));
  }
  return d;
}

// Parameters of a freshly initialised model (seeded), to start every rank and the reference from.
std::vector<torch::Tensor> initialParameters(bool withExtra) {
  torch::manual_seed(7);
  Net net(withExtra);
  std::vector<torch::Tensor> out;
  for (auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

void load(Net& net, const std::vector<torch::Tensor>& values, float offset = 0) {
  torch::NoGradGuard g;
  auto ps = net->parameters();
  for (size_t i = 0; i < ps.size(); ++i) ps[i].copy_(values[i] + offset);
}

std::vector<torch::Tensor> snapshot(Net& net) {
  std::vector<torch::Tensor> out;
  for (auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

enum class Opt { Sgd, Adam };
void PrintTo(Opt o, std::ostream* os) { *os << (o == Opt::Sgd ? "SGD" : "Adam"); }

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(Opt o, Net& net) {
  if (o == Opt::Sgd)
    return std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  return std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(1e-2));
}

// Every element within rtol relative (plus a tiny absolute floor for elements near zero).
void expectClose(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want, double rtol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    auto diff = (got[i] - want[i]).abs();
    auto bound = want[i].abs() * rtol + 1e-7;
    double worst = (diff / (want[i].abs() + 1e-7)).max().item<double>();
    EXPECT_TRUE((diff <= bound).all().item<bool>())
        << what << ": parameter " << i << " differs, worst relative " << worst;
  }
}

// One process, batch rows = N*B: the reference.
std::vector<torch::Tensor> trainSingle(const std::vector<torch::Tensor>& init, const Data& d, Opt o, int steps,
                                       bool withExtra = false) {
  Net net(withExtra);
  load(net, init);
  auto opt = makeOptimizer(o, net);
  for (int s = 0; s < steps; ++s) {
    opt->zero_grad();
    torch::mse_loss(net->forward(d.x[s]), d.y[s]).backward();
    opt->step();
  }
  return snapshot(net);
}

struct Results {
  std::mutex mu;
  std::vector<std::vector<torch::Tensor>> params;  // per rank
  std::vector<std::vector<std::vector<size_t>>> buckets;
  std::vector<uint64_t> layoutVersion;
  explicit Results(int n) : params(n), buckets(n), layoutVersion(n) {}
  void put(int r, Net& net, DistributedDataParallel& ddp) {
    std::lock_guard<std::mutex> lock(mu);
    params[r] = snapshot(net);
    buckets[r] = ddp.reducer().bucketAssignment();
    layoutVersion[r] = ddp.reducer().layoutVersion();
  }
};

void expectBitIdentical(const Results& res) {
  for (size_t r = 1; r < res.params.size(); ++r)
    for (size_t i = 0; i < res.params[0].size(); ++i)
      EXPECT_TRUE(torch::equal(res.params[r][i], res.params[0][i])) << "rank " << r << " parameter " << i;
}

DdpOptions smallBuckets() {
  DdpOptions o;
  o.reducer.firstBucketCapBytes = 4 << 10;  // l2.weight alone is 16 KiB: several buckets
  o.reducer.bucketCapBytes = 8 << 10;
  return o;
}

// Rank r trains on rows [r*B, (r+1)*B) of each step; its parameters start off by r (the broadcast fixes that).
void trainRank(Communicator& comm, const std::vector<torch::Tensor>& init, const Data& d, Opt o, int steps,
               DdpOptions ddpOptions, Results& res) {
  const int r = comm.rank();
  Net net;
  load(net, init, static_cast<float>(r));
  DistributedDataParallel ddp(net.ptr(), comm, ddpOptions);
  auto opt = makeOptimizer(o, net);
  for (int s = 0; s < steps; ++s) {
    opt->zero_grad();
    auto x = d.x[s].narrow(0, r * kBatch, kBatch), y = d.y[s].narrow(0, r * kBatch, kBatch);
    torch::mse_loss(net->forward(x), y).backward();
    opt->step();
  }
  res.put(r, net, ddp);
}

class Equivalence : public ::testing::TestWithParam<std::tuple<int, Opt, bool>> {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

TEST_P(Equivalence, NRanksWithBatchBMatchOneProcessWithBatchNB) {
  const auto [n, o, bucketView] = GetParam();
  auto init = initialParameters(false);
  Data d = makeData(n * kBatch, kSteps, 100 + n);
  auto want = trainSingle(init, d, o, kSteps);
  DdpOptions dopt = smallBuckets();
  dopt.reducer.gradientAsBucketView = bucketView;
  Results res(n);
  ThreadLauncher::run(
      n, [&](Communicator& c) { trainRank(c, init, d, o, kSteps, dopt, res); }, opts());
  for (int r = 0; r < n; ++r) expectClose(res.params[r], want, 1e-5, "rank " + std::to_string(r));
  expectBitIdentical(res);
}

INSTANTIATE_TEST_SUITE_P(Threads, Equivalence,
                         ::testing::Values(std::make_tuple(2, Opt::Sgd, false), std::make_tuple(3, Opt::Sgd, false),
                                           std::make_tuple(4, Opt::Sgd, false), std::make_tuple(2, Opt::Adam, false),
                                           std::make_tuple(3, Opt::Adam, false), std::make_tuple(4, Opt::Adam, false),
                                           std::make_tuple(2, Opt::Sgd, true), std::make_tuple(3, Opt::Adam, true)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  (std::get<1>(info.param) == Opt::Sgd ? "SGD" : "Adam") +
                                  (std::get<2>(info.param) ? "_bucketView" : "");
                         });

class TorchDdp : public ::testing::Test {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

TEST_F(TorchDdp, BucketsRebuiltFromReadinessOrderIdenticallyOnAllRanks) {
  const int n = 3;
  auto init = initialParameters(false);
  Data d = makeData(n * kBatch, 3, 5);
  auto want = trainSingle(init, d, Opt::Sgd, 3);
  Results res(n);
  ThreadLauncher::run(
      n, [&](Communicator& c) { trainRank(c, init, d, Opt::Sgd, 3, smallBuckets(), res); }, opts());
  expectClose(res.params[0], want, 1e-5, "rank 0");
  // Registration: head.weight 0, head.bias 1, l1.weight 2, l1.bias 3, l2.weight 4, l2.bias 5. The initial
  // buckets start from l2.bias (reverse registration); gradients came from head first, so the rebuilt first
  // bucket starts with one of head's parameters, and l1's come last.
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(res.layoutVersion[r], 1u) << "rank " << r;
    EXPECT_EQ(res.buckets[r], res.buckets[0]) << "rank " << r;
  }
  ASSERT_FALSE(res.buckets[0].empty());
  EXPECT_LE(res.buckets[0].front().front(), 1u);
  EXPECT_GE(res.buckets[0].back().back(), 2u);
  EXPECT_LE(res.buckets[0].back().back(), 3u);
}

TEST_F(TorchDdp, NoSyncAccumulationOverKMicroBatchesEqualsOneLargeBatch) {
  const int n = 2, k = 3, steps = 10;
  auto init = initialParameters(false);
  // Step s: rank r's micro-batch m is rows [(r*k + m)*B, ...): all N*K*B rows make the reference's batch.
  Data d = makeData(n * k * kBatch, steps, 11);
  auto want = trainSingle(init, d, Opt::Sgd, steps);
  Results res(n);
  ThreadLauncher::run(
      n,
      [&](Communicator& comm) {
        const int r = comm.rank();
        Net net;
        load(net, init);
        DistributedDataParallel ddp(net.ptr(), comm, smallBuckets());
        auto opt = makeOptimizer(Opt::Sgd, net);
        for (int s = 0; s < steps; ++s) {
          opt->zero_grad();
          for (int m = 0; m < k; ++m) {
            auto x = d.x[s].narrow(0, (r * k + m) * kBatch, kBatch), y = d.y[s].narrow(0, (r * k + m) * kBatch, kBatch);
            auto loss = torch::mse_loss(net->forward(x), y) / k;
            if (m + 1 < k) {
              auto guard = ddp.noSync();
              loss.backward();
            } else {
              loss.backward();
            }
          }
          opt->step();
        }
        res.put(r, net, ddp);
      },
      opts());
  for (int r = 0; r < n; ++r) expectClose(res.params[r], want, 1e-5, "rank " + std::to_string(r));
  expectBitIdentical(res);
}

TEST_F(TorchDdp, UnusedParameterIsAnErrorNamingIt) {
  auto init = initialParameters(true);
  ThreadLauncher::run(
      2,
      [&](Communicator& comm) {
        Net net(true);
        load(net, init);
        DistributedDataParallel ddp(net.ptr(), comm);
        auto loss = net->forward(torch::randn({4, kIn})).sum();
        try {
          loss.backward();
          ADD_FAILURE() << "backward did not throw";
        } catch (const std::exception& e) {
          std::string m = e.what();
          EXPECT_NE(m.find("extra.weight"), std::string::npos) << m;
          EXPECT_NE(m.find("extra.bias"), std::string::npos) << m;
          EXPECT_NE(m.find("findUnusedParameters"), std::string::npos) << m;
        }
      },
      opts());
}

// find-unused mode: `extra` is used on rank 0 only in even steps, never in odd ones. The reference is one process
// that runs every rank's shard (with that rank's choice) and averages the gradients.
TEST_F(TorchDdp, FindUnusedParametersMatchesPerShardReference) {
  const int n = 3, steps = 6;
  auto init = initialParameters(true);
  Data d = makeData(n * kBatch, steps, 21);
  auto uses = [](int r, int s) { return r == 0 && s % 2 == 0; };
  std::vector<torch::Tensor> want;
  {
    Net net(true);
    load(net, init);
    auto opt = makeOptimizer(Opt::Adam, net);
    auto ps = net->parameters();
    for (int s = 0; s < steps; ++s) {
      std::vector<torch::Tensor> sum(ps.size());
      for (int r = 0; r < n; ++r) {
        for (auto& p : ps) p.mutable_grad() = torch::Tensor();
        net->useExtra = uses(r, s);
        torch::mse_loss(net->forward(d.x[s].narrow(0, r * kBatch, kBatch)), d.y[s].narrow(0, r * kBatch, kBatch))
            .backward();
        for (size_t i = 0; i < ps.size(); ++i) {
          auto g = ps[i].grad().defined() ? ps[i].grad() : torch::zeros_like(ps[i]);
          sum[i] = sum[i].defined() ? sum[i] + g : g.clone();
        }
      }
      bool anyExtra = false;
      for (int r = 0; r < n; ++r) anyExtra = anyExtra || uses(r, s);
      for (size_t i = 0; i < ps.size(); ++i) {
        const bool isExtra = i >= 6;
        // Parameters unused on every rank keep the gradient they had: Adam skips undefined gradients.
        ps[i].mutable_grad() = (isExtra && !anyExtra) ? torch::Tensor() : sum[i] / n;
      }
      opt->step();
    }
    want = snapshot(net);
  }
  Results res(n);
  ThreadLauncher::run(
      n,
      [&](Communicator& comm) {
        const int r = comm.rank();
        Net net(true);
        load(net, init);
        DdpOptions o = smallBuckets();
        o.reducer.findUnusedParameters = true;
        DistributedDataParallel ddp(net.ptr(), comm, o);
        auto opt = makeOptimizer(Opt::Adam, net);
        for (int s = 0; s < steps; ++s) {
          for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();  // zero_grad(set_to_none)
          net->useExtra = uses(r, s);
          auto loss =
              torch::mse_loss(net->forward(d.x[s].narrow(0, r * kBatch, kBatch)), d.y[s].narrow(0, r * kBatch, kBatch));
          if (s >= 2) ddp.prepareForBackward({loss});  // early marking in later steps, found by finalize before
          loss.backward();
          auto extraGrad = net->extra->weight.grad();
          if (s % 2 == 1)
            EXPECT_FALSE(extraGrad.defined()) << "step " << s << ": unused everywhere, must stay undefined";
          else
            EXPECT_TRUE(extraGrad.defined()) << "step " << s;
          opt->step();
        }
        res.put(r, net, ddp);
      },
      opts());
  for (int r = 0; r < n; ++r) expectClose(res.params[r], want, 1e-5, "rank " + std::to_string(r));
  expectBitIdentical(res);
}

// `x * w`, whose backward gives no gradient for w: w's accumulator runs with none (its hook sees grad undefined).
struct TimesNoGradForW : torch::autograd::Function<TimesNoGradForW> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, torch::Tensor w) {
    ctx->save_for_backward({w});
    return x * w;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    return {g[0] * ctx->get_saved_variables()[0], torch::Tensor()};
  }
};

struct GatedImpl : torch::nn::Module {
  GatedImpl() {
    lin = register_module("lin", torch::nn::Linear(4, 3));
    gate = register_parameter("gate", torch::tensor({2.0, -1.0, 3.0}, torch::kFloat64));
    torch::NoGradGuard g;
    lin->to(torch::kFloat64);
    lin->weight.copy_(torch::arange(12, torch::kFloat64).reshape({3, 4}));
    lin->bias.fill_(1);
  }
  torch::Tensor forward(torch::Tensor x) { return TimesNoGradForW::apply(lin->forward(x), gate); }
  torch::nn::Linear lin{nullptr};
  torch::Tensor gate;
};
TORCH_MODULE(Gated);

// A parameter given no gradient (its accumulator runs without one): as PyTorch's reducer, zeros take its place, the
// iteration completes and its gradient is those zeros (also as a bucket view); with find-unused it is unused on every
// rank and stays undefined. The other gradients are the exact average (small integers, float64).
TEST_F(TorchDdp, ParameterGivenNoGradientTakesPartWithZeros) {
  const int n = 2, rows = 3;
  auto input = [](int r) { return torch::arange(rows * 4, torch::kFloat64).reshape({rows, 4}) * (r + 1); };
  // loss = sum((x W^T + b) * gate): dW = gate (x) column sums of x, db = rows * gate; averaged over the ranks.
  const auto gate = torch::tensor({2.0, -1.0, 3.0}, torch::kFloat64);
  torch::Tensor wantW = torch::zeros({3, 4}, torch::kFloat64);
  for (int r = 0; r < n; ++r) wantW += gate.unsqueeze(1) * input(r).sum(0).unsqueeze(0) / n;
  const torch::Tensor wantB = gate * rows;
  for (int mode = 0; mode < 3; ++mode) {
    const bool bucketView = mode == 1, findUnused = mode == 2;
    SCOPED_TRACE(findUnused ? "findUnusedParameters" : bucketView ? "gradientAsBucketView" : "default");
    ThreadLauncher::run(
        n,
        [&](Communicator& comm) {
          Gated net;
          DdpOptions o;
          o.reducer.findUnusedParameters = findUnused;
          o.reducer.gradientAsBucketView = bucketView;
          DistributedDataParallel ddp(net.ptr(), comm, o);
          for (int step = 0; step < 2; ++step) {
            for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
            net->forward(input(comm.rank())).sum().backward();
            ASSERT_TRUE(net->lin->weight.grad().defined());
            EXPECT_TRUE(net->lin->weight.grad().equal(wantW)) << "step " << step << "\n" << net->lin->weight.grad();
            EXPECT_TRUE(net->lin->bias.grad().equal(wantB)) << "step " << step << "\n" << net->lin->bias.grad();
            const torch::Tensor& g = net->gate.grad();
            if (findUnused) {
              EXPECT_FALSE(g.defined()) << "step " << step << ": unused on every rank, must stay undefined";
            } else {
              ASSERT_TRUE(g.defined()) << "step " << step;
              EXPECT_TRUE(g.equal(torch::zeros({3}, torch::kFloat64))) << "step " << step << "\n" << g;
            }
          }
        },
        opts());
  }
}

// Compression: one backward's averaged gradients against the exact average, then 20 SGD steps against the
// uncompressed reference.
void compressionCase(ddp::CommHook hook, double gradTol, double paramTol) {
  const int n = 2;
  auto init = initialParameters(false);
  Data d = makeData(n * kBatch, kSteps, 31);
  std::vector<torch::Tensor> exactGrads;
  {
    Net net;
    load(net, init);
    torch::mse_loss(net->forward(d.x[0]), d.y[0]).backward();
    for (auto& p : net->parameters()) exactGrads.push_back(p.grad().clone());
  }
  auto want = trainSingle(init, d, Opt::Sgd, kSteps);
  Results res(n);
  std::vector<std::vector<torch::Tensor>> firstGrads(n);
  ThreadLauncher::run(
      n,
      [&](Communicator& comm) {
        const int r = comm.rank();
        Net net;
        load(net, init);
        DistributedDataParallel ddp(net.ptr(), comm, smallBuckets());
        ddp.registerCommHook(hook);
        auto opt = makeOptimizer(Opt::Sgd, net);
        for (int s = 0; s < kSteps; ++s) {
          opt->zero_grad();
          torch::mse_loss(net->forward(d.x[s].narrow(0, r * kBatch, kBatch)), d.y[s].narrow(0, r * kBatch, kBatch))
              .backward();
          if (s == 0)
            for (auto& p : net->parameters()) firstGrads[r].push_back(p.grad().clone());
          opt->step();
        }
        res.put(r, net, ddp);
      },
      opts());
  for (size_t i = 0; i < exactGrads.size(); ++i) {
    double scale = exactGrads[i].abs().max().item<double>();
    double err = (firstGrads[0][i] - exactGrads[i]).abs().max().item<double>();
    EXPECT_LE(err, gradTol * scale) << "gradient " << i;
  }
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < want.size(); ++i) {
      double scale = want[i].abs().max().item<double>();
      double err = (res.params[r][i] - want[i]).abs().max().item<double>();
      EXPECT_LE(err, paramTol * scale) << "rank " << r << " parameter " << i;
    }
  expectBitIdentical(res);
}

// fp16: 11-bit significand, values pre-divided by 2 and summed once: within 2^-10 of each tensor's largest
// element (plus fp16's subnormal spacing for tiny elements).
TEST_F(TorchDdp, Fp16CompressionWithinTolerance) { compressionCase(ddp::hooks::fp16Compress(), 1.0 / 1024, 1e-2); }
TEST_F(TorchDdp, Bf16CompressionWithinTolerance) { compressionCase(ddp::hooks::bf16Compress(), 1.0 / 128, 5e-2); }

}  // namespace
}  // namespace collie::test
