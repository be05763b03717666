// Which sanitizer the tests were built with. A test whose cost under ThreadSanitizer is bulk data rather than
// concurrency (every byte copied is checked there) moves less under it; the release and ASan runs keep the full
// sizes.
#pragma once

namespace collie::test {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif
#else
inline constexpr bool kThreadSanitizer = false;
#endif

}  // namespace collie::test
