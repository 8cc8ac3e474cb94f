// pretrain_difflm: train a masked diffusion LM (--model-type difflm), an autoregressive GPT
// (--model-type gpt), a BERT (--model-type bert) or a T5 (--model-type t5). See --help and the README
// for the flags.
#include <cstdio>
#include <exception>

#include "core/error.h"
#include "train/arguments.h"
#include "train/bert_trainer.h"
#include "train/rank_output.h"
#include "train/t5_trainer.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  try {
    // Under mpirun / srun: one rank per process, rank 0 alone prints (train/rank_output.h).
    megadlm::start_ranks(&argc, &argv);
    megadlm::TrainArgs args;
    if (!megadlm::parse_train_args(argc, argv, args)) return 0;
    if (args.model_type == megadlm::ModelType::BERT) {
      megadlm::BertTrainer trainer(args);  // CPU, fp32, data and tensor parallel (docs/bert.md)
      trainer.run();
      return 0;
    }
    if (args.model_type == megadlm::ModelType::T5) {
      megadlm::T5Trainer trainer(args);  // CPU, fp32, data and tensor parallel (docs/t5.md)
      trainer.run();
      return 0;
    }
    megadlm::Trainer trainer(args);
    trainer.run();
    return 0;
  } catch (const megadlm::Error& e) {
    return megadlm::report_fatal("pretrain_difflm", "error", e.what(), 1);
  } catch (const std::exception& e) {
    return megadlm::report_fatal("pretrain_difflm", "internal error", e.what(), 2);
  }
}
