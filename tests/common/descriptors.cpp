// Counting a test process's descriptors (descriptors.hpp).
#include "common/descriptors.hpp"

#include <dirent.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "base/fd_limits.hpp"

namespace collie::test {

int listeningSockets() {
  int n = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    int on = 0;
    socklen_t len = sizeof(on);
    if (::getsockopt(std::atoi(e->d_name), SOL_SOCKET, SO_ACCEPTCONN, &on, &len) == 0 && on) ++n;
  }
  closedir(dir);
  return n;
}

long settledOpenDescriptors() {
  long last = base::fdUsage().open;
  int same = 0;
  for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       same < 2 && std::chrono::steady_clock::now() < end;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const long now = base::fdUsage().open;
    same = now == last ? same + 1 : 0;
    last = now;
  }
  return last;
}

}  // namespace collie::test
