/* Process entry when libcuresv.so is run as a program (main.c): the kernel leaves argc, argv and the
 * environment on the stack; hand their address to curesv_main with the stack aligned as a call
 * expects. curesv_main never returns. */
#if defined(__x86_64__)
	.text
	.globl	curesv_entry
	.hidden	curesv_entry
	.type	curesv_entry, @function
	.p2align 4
curesv_entry:
	.cfi_startproc
	.cfi_undefined rip
#ifdef __CET__
	endbr64
#endif
	xorl	%ebp, %ebp
	movq	%rsp, %rdi
	andq	$-16, %rsp
	call	curesv_main
	hlt
	.cfi_endproc
	.size	curesv_entry, .-curesv_entry
#endif
	.section .note.GNU-stack,"",@progbits
