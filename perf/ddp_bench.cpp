// ddp_bench: step time of one MLP under collie DDP, beside its compute-only step time and the time of its
// gradients' AllReduce alone, for several bucket caps. perf/ddp_bench_torch.py measures the same under PyTorch
// DDP + Gloo; perf/run_ddp_bench.sh runs both and prints them side by side.
//
//   collierun -n 2 ./ddp_bench [--layers 1024,2048,2048,2048,10] [--batch 8] [--rounds 9] [--steps 4]
//                              [--warmup 3] [--bucket-mb 1,5,25,50] [--threads 1] [--bucket-view 0|1]
//
// Per bucket cap the model is wrapped in DistributedDataParallel, and --rounds rounds each time three phases
// of --steps steps, all ranks together (a barrier before each phase):
//   compute    forward + backward + SGD step inside ddp.noSync(): the same work without communication
//   ddp        the same step synchronised (the gradients averaged over the ranks in buckets)
//   allreduce  the AllReduce of as many float32 elements as the model has parameters, in messages of the bucket
//              cap (all launched, then waited for): the communication DDP has to do, without compute
// Alternating the phases keeps a changing machine load from favouring one of them; each number is the median
// over the rounds of the slower rank's mean. overhead = the median over the rounds of (ddp - compute) of the same
// round; hidden = 1 - overhead / allreduce, clamped to [0, 1]: the share of the AllReduce time that does not show
// in the step time (the bucket copies count as overhead too, so it is a lower bound). Rank 0 prints a table and
// one "RESULT ..." line per cap.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <collie/torch_ddp.hpp>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::vector<int64_t> layers = {1024, 2048, 2048, 2048, 10};
  int64_t batch = 8;
  int rounds = 9, steps = 4, warmup = 3, threads = 1;
  std::vector<double> bucketMb = {1, 5, 25, 50};
  bool bucketView = false;
};

template <typename T>
std::vector<T> parseList(const std::string& s) {
  std::vector<T> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(static_cast<T>(std::stod(item)));
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--layers")
      a.layers = parseList<int64_t>(v);
    else if (k == "--batch")
      a.batch = std::stoll(v);
    else if (k == "--rounds")
      a.rounds = std::stoi(v);
    else if (k == "--steps")
      a.steps = std::stoi(v);
    else if (k == "--warmup")
      a.warmup = std::stoi(v);
    else if (k == "--bucket-mb")
      a.bucketMb = parseList<double>(v);
    else if (k == "--threads")
      a.threads = std::stoi(v);
    else if (k == "--bucket-view")
      a.bucketView = std::stoi(v) != 0;
    else {
      std::fprintf(stderr, "ddp_bench: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (a.layers.size() < 2 || a.steps < 1 || a.rounds < 1) std::exit(2);
  return a;
}

torch::nn::Sequential makeModel(const std::vector<int64_t>& layers) {
  torch::nn::Sequential m;
  for (size_t i = 0; i + 1 < layers.size(); ++i) {
    m->push_back(torch::nn::Linear(layers[i], layers[i + 1]));
    if (i + 2 < layers.size()) m->push_back(torch::nn::ReLU());
  }
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double slowest(collie::Communicator& comm, double v) {
  comm.allReduce(&v, &v, 1, collie::DataType::Float64, collie::ReduceOp::Max);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  torch::set_num_threads(a.threads);
  auto comm = collie::Communicator::createFromEnv();
  const bool root = comm->rank() == 0;

  torch::manual_seed(1 + comm->rank());
  auto model = makeModel(a.layers);
  auto x = torch::randn({a.batch, a.layers.front()});
  auto y = torch::randint(a.layers.back(), {a.batch}, torch::kLong);
  int64_t nparams = 0;
  for (auto& p : model->parameters()) nparams += p.numel();
  std::string layers;
  for (size_t i = 0; i < a.layers.size(); ++i) layers += (i ? "x" : "") + std::to_string(a.layers[i]);
  if (root)
    std::printf(
        "# collie DDP bench: %d ranks, layers %s, %lld parameters (%.1f MB), batch %lld per rank, %d torch "
        "thread(s), %d rounds of %d steps per phase after %d warm-up, bucket view %d\n",
        comm->size(), layers.c_str(), static_cast<long long>(nparams), nparams * 4.0 / 1e6,
        static_cast<long long>(a.batch), a.threads, a.rounds, a.steps, a.warmup, a.bucketView ? 1 : 0);

  std::vector<float> grads(static_cast<size_t>(nparams), 1.0f);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(1e-3));
  auto step = [&] {
    opt.zero_grad();
    torch::cross_entropy_loss(model->forward(x), y).backward();
    opt.step();
  };
  // Mean seconds of n calls of f, the slower rank's.
  auto timed = [&](int n, auto&& f) {
    comm->barrier();
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) f();
    return slowest(*comm, std::chrono::duration<double>(Clock::now() - t0).count() / n);
  };

  if (root)
    std::printf("%-8s %10s %10s %10s %12s %12s %8s %14s\n", "", "bucket_MB", "compute_ms", "ddp_ms", "overhead_ms",
                "allreduce_ms", "hidden", "exposed_wait_ms");
  for (double mb : a.bucketMb) {
    const size_t capBytes = static_cast<size_t>(mb * (1 << 20));
    // The communication alone: the gradient bytes in cap-sized messages, all in flight at once.
    const size_t chunk = std::max<size_t>(1, capBytes / 4);
    auto allReduceOnce = [&] {
      std::vector<collie::Work> works;
      for (size_t off = 0; off < grads.size(); off += chunk)
        works.push_back(comm->allReduceAsync(grads.data() + off, grads.data() + off,
                                             std::min(chunk, grads.size() - off), collie::DataType::Float32,
                                             collie::ReduceOp::Avg));
      for (auto& w : works) w.wait();
    };
    collie::ddp::DdpOptions o;
    o.reducer.bucketCapBytes = capBytes;
    o.reducer.gradientAsBucketView = a.bucketView;
    std::vector<double> compute, ddpStep, allreduce, wait;
    {
      collie::ddp::DistributedDataParallel ddp(model.ptr(), *comm, o);
      for (int i = 0; i < a.warmup; ++i) {
        step();
        allReduceOnce();
      }
      for (int r = 0; r < a.rounds; ++r) {
        compute.push_back(timed(a.steps, [&] {
          auto guard = ddp.noSync();
          step();
        }));
        ddpStep.push_back(timed(a.steps, step));
        wait.push_back(slowest(*comm, ddp.stats().waitSeconds));
        allreduce.push_back(timed(a.steps, allReduceOnce));
      }
      if (root && std::getenv("DDP_BENCH_VERBOSE")) {
        auto st = ddp.stats();
        std::printf(
            "# rank 0 last step: copy-in %.2f ms, finalize %.2f ms (wait %.2f, write-back %.2f), %zu buckets, "
            "%zu launched before finalize, first launch %.2f ms before finalize\n",
            st.copyInSeconds * 1e3, st.finalizeSeconds * 1e3, st.waitSeconds * 1e3, st.writeBackSeconds * 1e3,
            st.buckets, st.launchedEarly, st.firstLaunchToFinalize * 1e3);
      }
    }
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();  // no gradient views left behind
    std::vector<double> paired;  // ddp - compute of the same round: machine load drifts cancel out
    for (size_t r = 0; r < compute.size(); ++r) paired.push_back(ddpStep[r] - compute[r]);
    const double c = median(compute), d = median(ddpStep), ar = median(allreduce), w = median(wait);
    const double overhead = median(paired);
    const double hidden = std::clamp(1.0 - overhead / ar, 0.0, 1.0);
    if (root) {
      std::printf("%-8s %10.1f %10.2f %10.2f %12.2f %12.2f %7.0f%% %14.2f\n", "collie", mb, c * 1e3, d * 1e3,
                  overhead * 1e3, ar * 1e3, hidden * 100, w * 1e3);
      std::printf(
          "RESULT framework=collie bucket_mb=%g compute_ms=%.3f ddp_ms=%.3f overhead_ms=%.3f "
          "allreduce_ms=%.3f hidden_pct=%.1f\n",
          mb, c * 1e3, d * 1e3, overhead * 1e3, ar * 1e3, hidden * 100);
      std::fflush(stdout);
    }
  }
  return 0;
}
