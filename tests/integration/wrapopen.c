/* A library that wraps open(2) the usual way, with dlsym(RTLD_NEXT, "open"). Under a preloaded
 * dlsym override that forgets who called it, RTLD_NEXT resolves after the override instead of after
 * this library, finds this very open again and recurses until the stack runs out. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>

int wrapopen_calls;

int open(const char *path, int flags, ...)
{
	static int (*next)(const char *, int, ...);
	if (!next)
		next = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
	wrapopen_calls++;
	va_list ap;
	va_start(ap, flags);
	int mode = (flags & O_CREAT) ? va_arg(ap, int) : 0;
	va_end(ap);
	return next(path, flags, mode);
}
