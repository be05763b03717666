// ScopedEnv: sets an environment variable for a scope, so that ranks forked inside it inherit it.
#pragma once

#include <cstdlib>
#include <string>

namespace collie::test {

/// Sets an environment variable for the scope (children forked inside inherit it); a null name sets nothing.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name ? name : "") {
    if (name) setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (!name_.empty()) unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
};

}  // namespace collie::test
