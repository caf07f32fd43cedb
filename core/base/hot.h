/* How the allocation path's pieces ask to be inlined wherever they are called: each is a few
 * instructions of the common case, a call to its general half apart. */
#ifndef CURESV_HOT_H
#define CURESV_HOT_H

#define CURESV_HOT static inline __attribute__((always_inline))

/* The same for a function of external linkage that callers in other files reach: link-time
 * optimisation inlines it there, so the hook and the engine's step share one frame. Without it
 * (the sanitizer builds) it is an ordinary call. Its header declares it without `inline`, which
 * makes this the external definition (C11 6.7.4). */
#define CURESV_HOT_EXTERN inline __attribute__((always_inline))

#endif
