// The engine's version: `kestrel --version`, the server's GET /version. Raised by hand with
// each release (minor: a session's features; patch: fixes).
#pragma once

namespace kestrel {

inline constexpr const char* kVersion = "0.7.0";

}  // namespace kestrel
