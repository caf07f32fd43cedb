/* How the allocation path's pieces ask to be inlined wherever they are called: each is a few
 * instructions of the common case, a call to its general half apart. */
#ifndef CURESV_HOT_H
#define CURESV_HOT_H

#define CURESV_HOT static inline __attribute__((always_inline))

#endif
