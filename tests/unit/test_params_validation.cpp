// Every COLLIE_* parameter is checked: a bad value throws InvalidArgument naming the variable, the value and what
// is allowed; a good value is accepted. The accessors cache their value per process, so these tests call the
// pure check (params::validate) that every accessor runs on first read.
#include <gtest/gtest.h>

#include <chrono>
#include <collie/collie.hpp>
#include <set>
#include <string>
#include <vector>

#include "base/params.hpp"

namespace collie::base::params {
namespace {

struct Case {
  const char* env;
  std::vector<const char*> good;
  std::vector<const char*> bad;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"COLLIE_TIMEOUT",
       {"1", "300000", "3153600000000", "inf", "never", "NEVER", "Inf"},
       {"0", "-1", "-5", "99999999999999999999", "3153600000001", "abc", "10ms", "", " 5"}},
      {"COLLIE_PEER_DEAD_TIMEOUT",
       {"0", "1000", "20000", "3600000"},
       {"-1", "1", "999", "3600001", "99999999999999999999", "inf", "20s", ""}},
      {"COLLIE_FLIGHT_RECORDER", {"/tmp/job", "fr"}, {}},
      {"COLLIE_FLIGHT_RECORDER_ENTRIES", {"0", "1", "256", "1048576"}, {"-1", "1048577", "lots", "1e3"}},
      {"COLLIE_FLIGHT_RECORDER_DESTROY", {"0", "1"}, {"2", "-1", "yes"}},
      {"COLLIE_TRACE", {"/tmp/job", "trace"}, {}},
      {"COLLIE_STATS", {"0", "1"}, {"2", "-1", "yes"}},
      {"COLLIE_DEBUG", {"NONE", "WARN", "info", "Trace"}, {"VERBOSE", "", "2", "WARN,INFO"}},
      {"COLLIE_DEBUG_SUBSYS",
       {"ALL", "INIT,NET", "^coll", "tune,^env", "BOOTSTRAP"},
       {"NETWORK", "INIT,FOO", "^", "^^NET"}},
      {"COLLIE_DEBUG_FILE", {"/tmp/collie.%h.%p.log"}, {}},
      {"COLLIE_SOCKET_IFNAME", {"eth0", "^docker,lo", "=ib0"}, {}},
      {"COLLIE_SOCKET_FAMILY", {"AF_INET", "AF_INET6", "ipv4", "inet6"}, {"AF_UNIX", "af_inet", "4"}},
      {"COLLIE_SOCKETS_PER_PEER", {"1", "2", "64"}, {"0", "65", "-1", "two"}},
      {"COLLIE_STRIPE_MIN_BYTES", {"0", "262144", "9223372036854775807"}, {"-1", "9223372036854775808", "1k"}},
      {"COLLIE_CONNECT", {"lazy", "eager", "Eager"}, {"mesh", "lazy,eager", "0"}},
      {"COLLIE_PEER_CARDS", {"all", "directory", "Directory"}, {"some", "all,directory", "1"}},
      {"COLLIE_CONNECT_RETRIES", {"0", "50", "1000000"}, {"-1", "1000001", "many"}},
      {"COLLIE_SLICE_BYTES", {"0", "4096", "65536", "1073741824"}, {"-5", "1", "4095", "1073741825", "64k"}},
      {"COLLIE_SLICES_IN_FLIGHT", {"0", "1", "8", "1024"}, {"-1", "1025", "x"}},
      {"COLLIE_INIT_CHUNK", {"0", "1", "683", "1073741824"}, {"-1", "1073741825", "64k"}},
      {"COLLIE_SPIN_US", {"0", "20", "1000000"}, {"-1", "1000001", "20us"}},
      {"COLLIE_ALGO", {"ring", "^tree", "allreduce:ring;broadcast:tree"}, {}},
      {"COLLIE_TUNE_FILE", {"/tmp/tune"}, {}},
      {"COLLIE_TUNE_MEASURE", {"0", "1"}, {"2", "-1", "yes"}},
      {"COLLIE_ROOT_ADDR",
       {"10.0.0.1:29500", "[::1]:1", "host:65535"},
       {"10.0.0.1", ":29500", "h:0", "h:65536", "h:x"}},
      {"COLLIE_SECRET", {"0123456789abcdef0123456789ABCDEF"}, {"abc", "0123456789abcdef0123456789abcdeg"}},
      {"COLLIE_NET", {"auto", "tcp", "ucx", "UCX", "Auto"}, {"ib", "rdma", "tcp,ucx", "verbs"}},
      {"COLLIE_HOST_ID", {"node7", "rank/4", "rank%2"}, {}},  // rank/0 is refused at init (test_host_tuner)
      {"COLLIE_SHM_DISABLE", {"0", "1"}, {"2", "true", "-1"}},
      {"COLLIE_SHM_SLOTS", {"1", "8", "4096"}, {"0", "4097", "-8"}},
      {"COLLIE_SHM_SLOT_BYTES", {"64", "65536", "1073741824"}, {"63", "1073741825", "0"}},
      {"COLLIE_SHM_SINGLE_COPY", {"0", "1", "2"}, {"3", "-1", "on"}},
      {"COLLIE_SHM_SINGLE_COPY_MIN_BYTES", {"0", "65536"}, {"-1", "big"}},
      {"COLLIE_SHM_BACKING", {"memfd", "devshm"}, {"MEMFD", "tmpfs", "/dev/shm"}},
      {"COLLIE_PIN_THREADS", {"0", "1"}, {"2", "-1", "yes"}},
      {"COLLIE_CUDA_PLUGIN", {"/opt/lib/libcollie_cuda.so"}, {}},
  };
  return c;
}

bool isTextParam(const std::string& env) { return allowed(env) == "any text"; }

TEST(ParamsValidation, EveryRegistryParameterHasACaseAndEveryCheckedOneABadValue) {
  std::set<std::string> covered;
  for (const Case& c : cases()) covered.insert(c.env);
  for (const ParamInfo& p : all()) {
    EXPECT_TRUE(covered.count(p.env)) << p.env << " has no test case";
    EXPECT_NE(std::string(p.description).find("allowed: "), std::string::npos) << p.env;
  }
  for (const Case& c : cases()) {
    EXPECT_FALSE(c.good.empty()) << c.env;
    EXPECT_TRUE(isTextParam(c.env) || !c.bad.empty()) << c.env << " is checked but has no bad value tested";
  }
}

TEST(ParamsValidation, GoodValuesAreAccepted) {
  for (const Case& c : cases()) {
    for (const char* v : c.good) EXPECT_NO_THROW(validate(c.env, v)) << c.env << "=" << v;
  }
}

TEST(ParamsValidation, BadValuesAreRejectedNamingVariableValueAndAllowed) {
  for (const Case& c : cases()) {
    for (const char* v : c.bad) {
      try {
        validate(c.env, v);
        ADD_FAILURE() << c.env << "=" << v << " was accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
        const std::string what = e.what();
        EXPECT_NE(what.find(std::string(c.env) + "=" + v + ": expected " + allowed(c.env)), std::string::npos) << what;
      }
    }
  }
}

TEST(ParamsValidation, MessageMatchesTheDocumentedForm) {
  try {
    validate("COLLIE_SLICE_BYTES", "-5");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("COLLIE_SLICE_BYTES=-5: expected 0 (automatic) or an integer in [4096, 1073741824]"),
        std::string::npos)
        << e.what();
  }
}

TEST(ParamsValidation, TimeoutNeverIsAHundredYearsAndDoesNotOverflowADeadline) {
  EXPECT_EQ(validate("COLLIE_TIMEOUT", "never"), std::to_string(kNeverMs));
  EXPECT_EQ(validate("COLLIE_TIMEOUT", "inf"), std::to_string(kNeverMs));
  EXPECT_EQ(validate("COLLIE_TIMEOUT", "300000"), "300000");
  // now() + never must stay in the future (no wrap of steady_clock's nanosecond count).
  const auto now = std::chrono::steady_clock::now();
  const auto deadline = now + std::chrono::milliseconds(kNeverMs);
  EXPECT_GT(deadline, now);
  EXPECT_GT(std::chrono::duration_cast<std::chrono::hours>(deadline - now).count(), 24 * 365 * 99);
}

TEST(ParamsValidation, TimeoutDefaultsAreTenMinutesAndTwentySeconds) {
  // Late (alive, not calling) waits as long as torch's NCCL default; dead (unreachable) is told in 20 s.
  for (const ParamInfo& p : all()) {
    if (std::string(p.env) == "COLLIE_TIMEOUT") {
      EXPECT_STREQ(p.defaultValue, "600000");
    }
    if (std::string(p.env) == "COLLIE_PEER_DEAD_TIMEOUT") {
      EXPECT_STREQ(p.defaultValue, "20000");
    }
  }
}

TEST(ParamsValidation, IntegersAreNormalised) {
  EXPECT_EQ(validate("COLLIE_SOCKETS_PER_PEER", "0x10"), "16");
  EXPECT_EQ(validate("COLLIE_SLICE_BYTES", "65536"), "65536");
}

TEST(ParamsValidation, UnknownNameIsRejected) {
  try {
    validate("COLLIE_NO_SUCH_THING", "1");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("COLLIE_NO_SUCH_THING"), std::string::npos);
  }
}

}  // namespace
}  // namespace collie::base::params
