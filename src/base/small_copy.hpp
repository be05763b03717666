// moveBytes: memmove for the few bytes of a small call's message, without a call into libc. A call's payload of
// 8-32 bytes is copied four times on its way (into the executor's scratch, into the shm slot's line, out of it,
// into the output), and the library call costs more than the copy; two fixed-size moves that may overlap cover
// every size from k to 2k, and every byte is loaded before any is stored, so overlapping ranges are safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace collie::base {

/// memmove(dst, src, n).
inline void moveBytes(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (n > 32) {
    std::memmove(d, s, n);
  } else if (n >= 16) {
    unsigned char a[16], b[16];
    std::memcpy(a, s, 16);
    std::memcpy(b, s + n - 16, 16);
    std::memcpy(d, a, 16);
    std::memcpy(d + n - 16, b, 16);
  } else if (n >= 8) {
    uint64_t a, b;
    std::memcpy(&a, s, 8);
    std::memcpy(&b, s + n - 8, 8);
    std::memcpy(d, &a, 8);
    std::memcpy(d + n - 8, &b, 8);
  } else if (n >= 4) {
    uint32_t a, b;
    std::memcpy(&a, s, 4);
    std::memcpy(&b, s + n - 4, 4);
    std::memcpy(d, &a, 4);
    std::memcpy(d + n - 4, &b, 4);
  } else if (n > 0) {  // 0, n/2 and n-1 cover 1-3 bytes
    const unsigned char a = s[0], b = s[n / 2], c = s[n - 1];
    d[0] = a;
    d[n / 2] = b;
    d[n - 1] = c;
  }
}

}  // namespace collie::base
