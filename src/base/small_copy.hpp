// moveBytes: memmove for the few bytes of a small call's message, without a call into libc. A call's payload of
// 8-32 bytes is copied four times on its way (into the executor's scratch, into the shm slot's line, out of it,
// into the output), and the library call costs more than the copy; two fixed-size moves that may overlap cover
// every size from k to 2k, and every byte is loaded before any is stored, so overlapping ranges are safe.
#pragma once

#include <cstddef>
#include <cstring>

namespace collie::base {

/// Moves n bytes, k <= n <= 2k, as two k-byte moves that may overlap: both loaded before either is stored.
template <size_t K>
inline void moveTwoOverlapping(unsigned char* d, const unsigned char* s, size_t n) {
  unsigned char a[K], b[K];
  std::memcpy(a, s, K);
  std::memcpy(b, s + n - K, K);
  std::memcpy(d, a, K);
  std::memcpy(d + n - K, b, K);
}

/// memmove(dst, src, n).
inline void moveBytes(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (n > 32) {
    std::memmove(d, s, n);
  } else if (n >= 16) {
    moveTwoOverlapping<16>(d, s, n);
  } else if (n >= 8) {
    moveTwoOverlapping<8>(d, s, n);
  } else if (n >= 4) {
    moveTwoOverlapping<4>(d, s, n);
  } else if (n > 0) {  // 0, n/2 and n-1 cover 1-3 bytes
    const unsigned char a = s[0], b = s[n / 2], c = s[n - 1];
    d[0] = a;
    d[n / 2] = b;
    d[n - 1] = c;
  }
}

}  // namespace collie::base
