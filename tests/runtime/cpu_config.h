// The CPU engine configuration the runtime tests start from: an explicit KV block count (no
// memory profile) and two threads.
#pragma once

#include "kestrel/engine_config.h"

namespace kestrel::test {

inline EngineConfig cpu_config(int num_kv_blocks = 256) {
  EngineConfig c;
  c.device = "cpu";
  c.num_kv_blocks = num_kv_blocks;
  c.num_threads = 2;
  return c;
}

}  // namespace kestrel::test
