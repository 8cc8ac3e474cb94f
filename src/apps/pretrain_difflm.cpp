// pretrain_difflm: train a masked diffusion LM (--model-type difflm) or an autoregressive GPT
// (--model-type gpt). See --help and the README for the flags.
#include <cstdio>
#include <exception>

#include "core/error.h"
#include "train/arguments.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  try {
    megadlm::TrainArgs args;
    if (!megadlm::parse_train_args(argc, argv, args)) return 0;
    megadlm::Trainer trainer(args);
    trainer.run();
    return 0;
  } catch (const megadlm::Error& e) {
    std::fprintf(stderr, "pretrain_difflm: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pretrain_difflm: internal error: %s\n", e.what());
    return 2;
  }
}
