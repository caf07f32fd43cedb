/* Links libwrapopen.so and opens /dev/null through it: the wrapper's dlsym(RTLD_NEXT) must find
 * libc's open. Prints "rtld_next: wrapper calls=1 fd ok". */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

extern int wrapopen_calls;

int main(void)
{
	int fd = open("/dev/null", O_RDONLY);
	int good = fd >= 0 && wrapopen_calls == 1;
	printf("rtld_next: wrapper calls=%d fd=%d %s\n", wrapopen_calls, fd, good ? "ok" : "FAILED");
	if (fd >= 0)
		close(fd);
	return !good;
}
