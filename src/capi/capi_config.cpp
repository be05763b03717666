// The one reader of collieConfig_t (see capi_config.hpp).
#include "capi/capi_config.hpp"

#include <cstddef>

#include "base/errors.hpp"

namespace collie::capi {

namespace {

// True when the caller's config (of config->size bytes) holds the whole of field [offset, offset + bytes).
bool covers(const collieConfig_t* config, size_t offset, size_t bytes) { return config->size >= offset + bytes; }
#define COLLIE_CONFIG_HAS(config, field) \
  covers(config, offsetof(collieConfig_t, field), sizeof(static_cast<collieConfig_t*>(nullptr)->field))

}  // namespace

collieResult_t parseConfig(const collieConfig_t* config, ParsedConfig* out, std::string* why) {
  *out = ParsedConfig{};
  if (!config) return collieSuccess;
  const size_t header = offsetof(collieConfig_t, version) + sizeof(config->version);
  if (config->size < header) {
    *why = collie::base::format(
        "config->size=%zu is not the size of a collieConfig_t: initialise the config with COLLIE_CONFIG_INITIALIZER",
        config->size);
    return collieInvalidArgument;
  }
  if (config->magic != COLLIE_CONFIG_MAGIC) {
    *why = collie::base::format(
        "config->magic=0x%x is not COLLIE_CONFIG_MAGIC (0x%x): initialise the config with COLLIE_CONFIG_INITIALIZER",
        config->magic, COLLIE_CONFIG_MAGIC);
    return collieInvalidArgument;
  }
  if (config->version == 0 || config->version > static_cast<unsigned>(COLLIE_VERSION)) {
    *why = collie::base::format(
        "config->version=%u: expected a collie version up to %d (initialise the config with "
        "COLLIE_CONFIG_INITIALIZER)",
        config->version, COLLIE_VERSION);
    return collieInvalidArgument;
  }
  if (COLLIE_CONFIG_HAS(config, blocking) && config->blocking != COLLIE_CONFIG_UNDEF_INT)
    out->blocking = config->blocking != 0;
  if (COLLIE_CONFIG_HAS(config, timeoutMs) && config->timeoutMs != COLLIE_CONFIG_UNDEF_INT) {
    if (config->timeoutMs <= 0) {
      *why = collie::base::format("config->timeoutMs=%d must be positive", config->timeoutMs);
      return collieInvalidArgument;
    }
    out->options.timeout = std::chrono::milliseconds(config->timeoutMs);
  }
  if (COLLIE_CONFIG_HAS(config, commName) && config->commName) out->options.name = config->commName;
  if (COLLIE_CONFIG_HAS(config, splitShare) && config->splitShare != COLLIE_CONFIG_UNDEF_INT) {
    if (config->splitShare != 0 && config->splitShare != 1) {
      *why = collie::base::format("config->splitShare=%d: expected 0 or 1", config->splitShare);
      return collieInvalidArgument;
    }
    out->options.shareConnections = config->splitShare == 1;
    out->splitShareSet = true;
  }
  return collieSuccess;
}
#undef COLLIE_CONFIG_HAS

}  // namespace collie::capi
