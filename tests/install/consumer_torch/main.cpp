// Builds against the installed torch_ddp.hpp and collie_torch: one rank, one linear layer, one DDP step.
#include <torch/torch.h>

#include <collie/torch_ddp.hpp>
#include <cstdio>

int main() {
  auto comms = collie::Communicator::createAll(1);
  auto net = std::make_shared<torch::nn::LinearImpl>(4, 2);
  collie::ddp::DistributedDataParallel ddp(net, *comms[0]);
  auto loss = net->forward(torch::ones({3, 4})).sum();
  loss.backward();
  if (!net->weight.grad().defined()) {
    std::fprintf(stderr, "consumer_torch: no gradient after backward\n");
    return 1;
  }
  std::printf("consumer_torch: one DDP step on %d rank\n", comms[0]->size());
  return 0;
}
