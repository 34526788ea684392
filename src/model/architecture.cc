#include "model/architecture.h"

#include "core/error.h"

namespace kestrel {
namespace {

constexpr ArchitectureSpec kArchitectures[] = {
    {"Qwen3ForCausalLM", "model.", true},
    {"Qwen2ForCausalLM", "model.", false},
    {"LlamaForCausalLM", "model.", true},
    {"MistralForCausalLM", "model.", true},  // Llama's layers; its window: ModelConfig
};

}  // namespace

const ArchitectureSpec& find_architecture(const std::string& architecture) {
  std::string names;
  for (const ArchitectureSpec& a : kArchitectures) {
    if (a.name == architecture) return a;
    names += (names.empty() ? "" : ", ") + std::string(a.name);
  }
  throw_error("the model does not implement architecture '{}' (supported: {})", architecture,
              names);
}

}  // namespace kestrel
