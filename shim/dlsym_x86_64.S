/* dlsym for x86-64: ask curesv_dlsym_answer(handle, name); if it returns NULL, tail-jump to glibc's
 * dlsym with the caller's return address untouched, so that glibc resolves RTLD_NEXT relative to
 * the real caller (see dlsym.c). */
#if defined(__x86_64__)
	.text
	.globl	dlsym
	.type	dlsym, @function
	.p2align 4
dlsym:
	.cfi_startproc
#ifdef __CET__
	endbr64
#endif
	pushq	%rdi
	.cfi_adjust_cfa_offset 8
	pushq	%rsi
	.cfi_adjust_cfa_offset 8
	subq	$8, %rsp		/* the call below needs a 16-byte aligned stack */
	.cfi_adjust_cfa_offset 8
	call	curesv_dlsym_answer
	addq	$8, %rsp
	.cfi_adjust_cfa_offset -8
	popq	%rsi
	.cfi_adjust_cfa_offset -8
	popq	%rdi
	.cfi_adjust_cfa_offset -8
	testq	%rax, %rax
	jz	1f
	ret
1:
	jmp	*curesv_real_dlsym(%rip)
	.cfi_endproc
	.size	dlsym, .-dlsym
#endif
	.section .note.GNU-stack,"",@progbits
