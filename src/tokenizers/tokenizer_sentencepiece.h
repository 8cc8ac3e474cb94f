#pragma once
// SentencePieceTokenizer (also Megatron's Llama2Tokenizer and GPTSentencePieceTokenizer): a .model file
// run through libsentencepiece. Built only where the library was found (MEGADLM_HAVE_SENTENCEPIECE);
// elsewhere the factory throws an Error saying so.
//
// eod is the model's </s> (eos_id); a model without one gets "<EOD>" appended as a special token.
// Added special tokens take ids after the model's pieces, or a piece's own id if the model has it;
// they are not recognised inside the text (SentencePiece's user_defined_symbols are).
#include <memory>

#include "tokenizers/tokenizer.h"

namespace megadlm {

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const TokenizerSpec& spec);

}  // namespace megadlm
