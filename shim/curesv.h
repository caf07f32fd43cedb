/* The control API, for programs that cooperate with curesv (README "The control API"): this is
 * the header they include with -Ishim in the source tree; make install puts core/curesv.h, which
 * it forwards to, in PREFIX/include. */
#include "../core/curesv.h"
