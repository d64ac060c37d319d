/*
 * dlsym as the shim exports it, under both symbol versions programs bind to (GLIBC_2.2.5 for
 * binaries linked before glibc 2.34, GLIBC_2.34 after).
 *
 * Note [Why dlsym starts in assembly]
 * glibc's dlsym looks at its caller's return address: dlsym(RTLD_NEXT, "malloc") means "the next
 * definition after the object that called me". A C++ override that calls the real dlsym becomes
 * that caller, and another preloaded library asking for RTLD_NEXT would be handed the wrong
 * object (itself, sometimes, and recurse). So the entry is a few instructions that tail-jump to
 * glibc's dlsym for every name that is not shaped like a driver export, leaving the caller's
 * return address in place. Only "cu" and a capital letter (cuInit, cuMemAlloc_v2, and the like)
 * take the C++ path (vramspill_dlsym_driver_symbol): "cu" alone would also send it the
 * runtime's and the libraries' names (cudaMalloc, cublasCreate_v2, cudnnCreate, curand...) and
 * the C library's cuserid, whose interposers then found themselves as the next definition.
 * The very first call of any other name finds glibc's dlsym first (vramspill_resolve_real_dlsym,
 * called with the arguments saved) and then tail-jumps to it like every later call: answering it
 * from C++ would make the shim the caller, and an interposer preloaded after the shim whose
 * dlsym(RTLD_NEXT, "getpid") happened to be the process's first dlsym call got its own getpid
 * back and recursed (tests/shim/lifecycle, Dlsym.RtldNextFromAnotherPreloadedLibrary...).
 */
    .text
    .globl vramspill_dlsym_entry
    .type vramspill_dlsym_entry, @function
vramspill_dlsym_entry:
    .symver vramspill_dlsym_entry, dlsym@GLIBC_2.2.5
    .globl vramspill_dlsym_entry_default
    .type vramspill_dlsym_entry_default, @function
vramspill_dlsym_entry_default:
    .symver vramspill_dlsym_entry_default, dlsym@@GLIBC_2.34
#if defined(__x86_64__)
    .cfi_startproc
    testq   %rsi, %rsi
    je      .Lforward
    cmpb    $0x63, (%rsi)                 /* 'c' */
    jne     .Lforward
    cmpb    $0x75, 1(%rsi)                /* 'u' */
    jne     .Lforward
    movzbl  2(%rsi), %eax                 /* rax is scratch here, and set again below */
    subl    $0x41, %eax                   /* 'A' */
    cmpl    $25, %eax                     /* up to 'Z' */
    jbe     .Ldriver
.Lforward:
    movq    vramspill_real_dlsym_pointer(%rip), %rax
    testq   %rax, %rax
    je      .Lresolve
    jmp     *%rax
.Ldriver:
    jmp     vramspill_dlsym_driver_symbol
.Lresolve:                                /* first call: the caller's return address stays */
    pushq   %rdi                          /* on top of the stack for the jump below */
    .cfi_adjust_cfa_offset 8
    pushq   %rsi
    .cfi_adjust_cfa_offset 8
    subq    $8, %rsp                      /* 16-byte aligned at the call */
    .cfi_adjust_cfa_offset 8
    call    vramspill_resolve_real_dlsym
    addq    $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq    %rsi
    .cfi_adjust_cfa_offset -8
    popq    %rdi
    .cfi_adjust_cfa_offset -8
    testq   %rax, %rax
    je      .Ldriver                      /* no real dlsym: the C++ path answers null */
    jmp     *%rax
    .cfi_endproc
#elif defined(__aarch64__)
    .cfi_startproc
    cbz     x1, .Lforward
    ldrb    w9, [x1]
    cmp     w9, #0x63                     /* 'c' */
    b.ne    .Lforward
    ldrb    w9, [x1, #1]
    cmp     w9, #0x75                     /* 'u' */
    b.ne    .Lforward
    ldrb    w9, [x1, #2]
    sub     w9, w9, #0x41                 /* 'A' */
    cmp     w9, #25                       /* up to 'Z' */
    b.ls    .Ldriver
.Lforward:
    adrp    x9, vramspill_real_dlsym_pointer
    ldr     x9, [x9, :lo12:vramspill_real_dlsym_pointer]
    cbz     x9, .Lresolve
    br      x9
.Ldriver:
    b       vramspill_dlsym_driver_symbol
.Lresolve:                                /* first call: keep the arguments and the caller's */
    stp     x29, x30, [sp, #-32]!         /* return address (x30) across the call */
    .cfi_def_cfa_offset 32
    .cfi_offset 29, -32
    .cfi_offset 30, -24
    mov     x29, sp
    stp     x0, x1, [sp, #16]
    bl      vramspill_resolve_real_dlsym
    mov     x9, x0
    ldp     x0, x1, [sp, #16]
    ldp     x29, x30, [sp], #32
    .cfi_restore 30
    .cfi_restore 29
    .cfi_def_cfa_offset 0
    cbz     x9, .Ldriver                  /* no real dlsym: the C++ path answers null */
    br      x9
    .cfi_endproc
#else
#error "vramspill's dlsym entry is written for x86-64 and AArch64 only"
#endif
    .size vramspill_dlsym_entry, . - vramspill_dlsym_entry
    .size vramspill_dlsym_entry_default, . - vramspill_dlsym_entry_default
    .section .note.GNU-stack, "", @progbits
