/* Built as libc10_cuda.so: a library with the name of PyTorch's CUDA allocator, so that a program
 * which loads it looks, to curesv's report, like one whose caching allocator holds memory. */
int curesv_test_fake_c10(void);
int curesv_test_fake_c10(void)
{
	return 10;
}
