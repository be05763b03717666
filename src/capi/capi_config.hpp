// The C API's one reader of collieConfig_t (every entry point that takes a config: init, init from the
// environment, split, shrink): it checks size, magic and version before reading any field, and reads a field only when
// config->size covers it (a config from an older header is shorter).
#pragma once

#include <collie/collie.h>

#include <collie/collie.hpp>
#include <string>

namespace collie::capi {

/// What a collieConfig_t asks for, once parsed.
struct ParsedConfig {
  collie::Options options;
  bool blocking = true;
  bool splitShareSet = false;  ///< the config set splitShare (options.shareConnections holds it)
};

/// Parses `config` (NULL: the defaults) into *out; collieInvalidArgument with *why saying which field and what was
/// expected when it is bad.
collieResult_t parseConfig(const collieConfig_t* config, ParsedConfig* out, std::string* why);

}  // namespace collie::capi
