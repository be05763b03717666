// ddp_shrink: data-parallel training that goes on after losing a rank, with collie's DDP layer
// (collie/ddp.hpp, framework-agnostic) and Communicator::shrink.
//
//   collierun --keep-going -n 4 ./ddp_shrink [--steps 300] [--kill-rank 1] [--kill-step 137] [--checkpoint-every 25]
//
// The model is a small MLP (16 -> 32 tanh -> 4) written out by hand, trained with SGD and momentum to imitate a
// fixed random "teacher" MLP on data every rank generates from the seed. Each step the global batch of 240
// samples is split evenly over the ranks; the GradientReducer averages the gradients (in several small buckets,
// launched while the "backward pass" still marks gradients ready, as under autograd).
//
// Every --checkpoint-every steps each rank copies the parameters, the momentum and the step number into memory
// (every rank holds the same checkpoint, so any survivor can resume). At --kill-step the rank --kill-rank kills
// itself with SIGKILL in the middle of its backward pass, with a bucket's AllReduce in flight. The others get an
// error (RemoteError) from the step, and then, without any launcher or bootstrap root (rank 0 may be the one that
// died):
//   1. drop the reducer and shrink the communicator, excluding the lost rank (every survivor passes the same list:
//      a real job learns who is gone from its launcher or rendezvous store; here every rank knows whom the example
//      kills);
//   2. make a new reducer on the smaller communicator, reload the checkpoint, and train on from its step: the global
//      batch is now split over fewer ranks, so the training continues as if nothing had happened.
// Output (rank 0 of the current communicator): the loss every 20 steps, the recovery, and at the end on every rank
// a hash of its final parameters and whether it equals every other survivor's. Exit code 0 when the parameters
// agree and the loss fell to under a tenth of its first value.
#include <signal.h>

#include <chrono>
#include <cmath>
#include <collie/collie.hpp>
#include <collie/ddp.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kIn = 16, kHidden = 32, kOut = 4;
constexpr int kGlobalBatch = 240;  // divisible by 1..6 ranks
constexpr int kSamples = 4800;

struct Args {
  int steps = 300;
  int killRank = -1;  // a rank of the first communicator, or -1: nobody dies
  int killStep = 137;
  int checkpointEvery = 25;
  float lr = 0.05f, momentum = 0.9f;
};

[[noreturn]] void usage(const char* bad) {
  if (bad) std::fprintf(stderr, "ddp_shrink: bad argument '%s'\n", bad);
  std::fprintf(stderr,
               "usage: ddp_shrink [--steps N] [--kill-rank R] [--kill-step S] [--checkpoint-every K] [--lr LR]\n");
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage(argv[i]);
    const char* v = argv[++i];
    if (k == "--steps")
      a.steps = std::atoi(v);
    else if (k == "--kill-rank")
      a.killRank = std::atoi(v);
    else if (k == "--kill-step")
      a.killStep = std::atoi(v);
    else if (k == "--checkpoint-every")
      a.checkpointEvery = std::atoi(v);
    else if (k == "--lr")
      a.lr = static_cast<float>(std::atof(v));
    else
      usage(k.c_str());
  }
  if (a.steps < 1 || a.checkpointEvery < 1) usage(nullptr);
  return a;
}

// The MLP's parameters, in registration (forward) order: W1 [hidden x in], b1, W2 [out x hidden], b2.
using Tensors = std::vector<std::vector<float>>;
Tensors shapes() {
  return {std::vector<float>(kHidden * kIn), std::vector<float>(kHidden), std::vector<float>(kOut * kHidden),
          std::vector<float>(kOut)};
}
const char* const kNames[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};

Tensors randomMlp(uint64_t seed, float scale) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensors p = shapes();
  for (size_t t = 0; t < p.size(); ++t)
    for (float& v : p[t]) v = normal(rng) * scale / (t == 0 ? std::sqrt(float(kIn)) : std::sqrt(float(kHidden)));
  return p;
}

// Forward for one sample: hidden activations into h, output into y.
void forward(const Tensors& p, const float* x, float* h, float* y) {
  for (int j = 0; j < kHidden; ++j) {
    float z = p[1][j];
    for (int i = 0; i < kIn; ++i) z += p[0][j * kIn + i] * x[i];
    h[j] = std::tanh(z);
  }
  for (int o = 0; o < kOut; ++o) {
    float z = p[3][o];
    for (int j = 0; j < kHidden; ++j) z += p[2][o * kHidden + j] * h[j];
    y[o] = z;
  }
}

struct Data {
  std::vector<float> x, t;  // kSamples x kIn, kSamples x kOut
};

// The same on every rank: inputs from the seed, targets from a random teacher MLP plus a little noise.
Data makeData() {
  Data d;
  d.x.resize(kSamples * kIn);
  d.t.resize(kSamples * kOut);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : d.x) v = normal(rng);
  const Tensors teacher = randomMlp(11, 2.0f);
  float h[kHidden];
  for (int s = 0; s < kSamples; ++s) {
    forward(teacher, &d.x[s * kIn], h, &d.t[s * kOut]);
    for (int o = 0; o < kOut; ++o) d.t[s * kOut + o] += 0.01f * normal(rng);
  }
  return d;
}

// Mean squared error over samples [first, first + count) (wrapping around the data set) and its gradient.
float lossAndGradient(const Tensors& p, const Data& d, int64_t first, int count, Tensors& g) {
  g = shapes();
  float loss = 0, h[kHidden], y[kOut], dh[kHidden];
  const float norm = 1.0f / static_cast<float>(count * kOut);
  for (int b = 0; b < count; ++b) {
    const int64_t s = (first + b) % kSamples;
    const float* x = &d.x[s * kIn];
    forward(p, x, h, y);
    for (int j = 0; j < kHidden; ++j) dh[j] = 0;
    for (int o = 0; o < kOut; ++o) {
      const float err = y[o] - d.t[s * kOut + o];
      loss += err * err * norm;
      const float dy = 2 * err * norm;
      g[3][o] += dy;
      for (int j = 0; j < kHidden; ++j) {
        g[2][o * kHidden + j] += dy * h[j];
        dh[j] += dy * p[2][o * kHidden + j];
      }
    }
    for (int j = 0; j < kHidden; ++j) {
      const float dz = dh[j] * (1 - h[j] * h[j]);
      g[1][j] += dz;
      for (int i = 0; i < kIn; ++i) g[0][j * kIn + i] += dz * x[i];
    }
  }
  return loss;
}

struct Checkpoint {
  int step = 0;
  Tensors params, momentum;
};

std::unique_ptr<collie::ddp::GradientReducer> makeReducer(collie::Communicator& comm, Tensors& params) {
  std::vector<collie::ddp::Parameter> list;
  for (size_t t = 0; t < params.size(); ++t)
    list.push_back({kNames[t], params[t].size(), collie::DataType::Float32, {}, params[t].data()});
  collie::ddp::ReducerOptions options;
  options.bucketCapBytes = options.firstBucketCapBytes = 512;  // several buckets, so some launch during backward
  return std::make_unique<collie::ddp::GradientReducer>(comm, std::move(list), options);
}

uint64_t hashOf(const Tensors& p) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& t : p)
    for (float v : t) {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof(bits));
      h = (h ^ bits) * 0x100000001b3ull;
    }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::unique_ptr<collie::Communicator> comm = collie::Communicator::createFromEnv();
  const int worldRank = comm->rank(), worldSize = comm->size();
  const Data data = makeData();
  Tensors params = randomMlp(1000 + static_cast<uint64_t>(worldRank), 1.0f);  // rank 0's wins: the reducer broadcasts
  Tensors momentum = shapes(), grads;
  auto reducer = makeReducer(*comm, params);
  Checkpoint checkpoint;
  float firstLoss = -1, lastLoss = 0;
  if (comm->rank() == 0)
    std::printf("ddp_shrink: %d ranks, %d steps, global batch %d, checkpoint every %d steps\n", comm->size(), a.steps,
                kGlobalBatch, a.checkpointEvery);

  for (int step = 0; step < a.steps; ++step) {
    if (step % a.checkpointEvery == 0) checkpoint = {step, params, momentum};
    try {
      const int n = comm->size(), perRank = kGlobalBatch / n;
      const int64_t first = static_cast<int64_t>(step) * kGlobalBatch + comm->rank() * perRank;
      float loss = lossAndGradient(params, data, first, perRank, grads);
      // "Backward": gradients become ready last layer first; each full bucket starts its AllReduce at once.
      for (int t = static_cast<int>(params.size()) - 1; t >= 0; --t) {
        reducer->markReady(static_cast<size_t>(t), grads[static_cast<size_t>(t)].data());
        if (worldRank == a.killRank && step == a.killStep && t == 2) {
          std::printf("rank %d: killing myself (SIGKILL) at step %d, in the middle of backward\n", worldRank, step);
          std::fflush(stdout);
          raise(SIGKILL);
        }
      }
      reducer->finalize();  // grads now hold the average over the ranks
      for (size_t t = 0; t < params.size(); ++t)
        for (size_t i = 0; i < params[t].size(); ++i) {
          momentum[t][i] = a.momentum * momentum[t][i] + grads[t][i];
          params[t][i] -= a.lr * momentum[t][i];
        }
      comm->allReduce(&loss, &loss, 1, collie::DataType::Float32, collie::ReduceOp::Avg);
      if (firstLoss < 0) firstLoss = loss;
      lastLoss = loss;
      if (comm->rank() == 0 && (step % 20 == 0 || step == a.steps - 1))
        std::printf("step %3d  loss %.6f  (%d ranks)\n", step, loss, n);
    } catch (const collie::Error& e) {
      if (a.killRank < 0 || comm->size() != worldSize) {  // only the one planned loss is survived here
        std::fprintf(stderr, "rank %d: step %d failed: %s\n", worldRank, step, e.what());
        return 1;
      }
      // A rank is gone: the survivors build a communicator of their own and resume from the checkpoint.
      const auto t0 = std::chrono::steady_clock::now();
      reducer.reset();
      const int exclude[] = {a.killRank};
      comm = comm->shrink(exclude);
      params = checkpoint.params;
      momentum = checkpoint.momentum;
      reducer = makeReducer(*comm, params);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::printf(
          "rank %d: step %d failed (error code %d); shrank to rank %d of %d in %.1f ms, resuming from the "
          "checkpoint of step %d\n",
          worldRank, step, static_cast<int>(e.code()), comm->rank(), comm->size(), ms, checkpoint.step);
      std::fflush(stdout);
      step = checkpoint.step - 1;
    }
  }

  // Every survivor must hold the same model.
  const uint64_t mine = hashOf(params);
  std::vector<uint64_t> all(static_cast<size_t>(comm->size()));
  comm->allGather(&mine, all.data(), 1, collie::DataType::Uint64);
  bool same = true;
  for (uint64_t h : all) same = same && h == mine;
  const bool learned = lastLoss < firstLoss / 10;
  std::printf("rank %d (rank %d of %d at the end): loss %.6f -> %.6f, parameters %016llx, identical on all %d: %s\n",
              worldRank, comm->rank(), comm->size(), firstLoss, lastLoss, static_cast<unsigned long long>(mine),
              comm->size(), same ? "yes" : "NO");
  return same && learned ? 0 : 1;
}
