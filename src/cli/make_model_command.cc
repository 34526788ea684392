#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/dtype.h"
#include "io/random_model.h"

namespace kestrel::cli {

Runner add_make_model_command(CLI::App& app) {
  struct Options {
    RandomModelSpec spec;
    std::string out;
    std::string tokenizer_dir;
    std::string dtype;
    bool untied = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "make-model", "write a Qwen3-architecture model directory with deterministic random weights");
  // Sizes left out come from the preset; one given must be at least 1.
  cmd->add_option("--out", o->out, "output directory")->required();
  cmd->add_option("--preset", o->spec.preset, "tiny, qwen3-0.6b, qwen3-8b or qwen3-32b")->capture_default_str();
  cmd->add_option("--tokenizer-dir", o->tokenizer_dir,
                  "copy tokenizer.json and tokenizer_config.json from here");
  cmd->add_option("--vocab-size", o->spec.vocab_size)->check(at_least(1));
  cmd->add_option("--hidden-size", o->spec.hidden_size)->check(at_least(1));
  cmd->add_option("--intermediate-size", o->spec.intermediate_size)->check(at_least(1));
  cmd->add_option("--layers", o->spec.num_layers)->check(at_least(1));
  cmd->add_option("--heads", o->spec.num_heads)->check(at_least(1));
  cmd->add_option("--kv-heads", o->spec.num_kv_heads)->check(at_least(1));
  cmd->add_option("--head-dim", o->spec.head_dim)->check(at_least(1));
  cmd->add_option("--max-position-embeddings", o->spec.max_position_embeddings)->check(at_least(1));
  cmd->add_option("--dtype", o->dtype, "BF16, F16 or F32");
  cmd->add_flag("--untied", o->untied, "separate lm_head.weight");
  cmd->add_option("--seed", o->spec.seed)->check(seed_value())->capture_default_str();
  return [o] {
    if (!o->dtype.empty()) o->spec.dtype = parse_safetensors_dtype(o->dtype);
    if (o->untied) o->spec.tie_word_embeddings = false;
    write_random_model(o->spec, o->out, o->tokenizer_dir);
    std::printf("wrote %s model to %s\n", o->spec.preset.c_str(), o->out.c_str());
    return 0;
  };
}

}  // namespace kestrel::cli
