/*
 * dlsym as the shim exports it, under both symbol versions programs bind to (GLIBC_2.2.5 for
 * binaries linked before glibc 2.34, GLIBC_2.34 after).
 *
 * Note [Why dlsym starts in assembly]
 * glibc's dlsym looks at its caller's return address: dlsym(RTLD_NEXT, "malloc") means "the next
 * definition after the object that called me". A C++ override that calls the real dlsym becomes
 * that caller, and another preloaded library asking for RTLD_NEXT would be handed the wrong
 * object (itself, sometimes, and recurse). So the entry is a few instructions that tail-jump to
 * glibc's dlsym for every name that does not start with "cu", leaving the caller's return
 * address in place. Only driver names take the C++ path (vramspill_dlsym_driver_symbol), as
 * does the very first call, before the real dlsym is known.
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
    je      .Ldriver
.Lforward:
    movq    vramspill_real_dlsym_pointer(%rip), %rax
    testq   %rax, %rax
    je      .Ldriver
    jmp     *%rax
.Ldriver:
    jmp     vramspill_dlsym_driver_symbol
    .cfi_endproc
#elif defined(__aarch64__)
    .cfi_startproc
    cbz     x1, .Lforward
    ldrb    w9, [x1]
    cmp     w9, #0x63                     /* 'c' */
    b.ne    .Lforward
    ldrb    w9, [x1, #1]
    cmp     w9, #0x75                     /* 'u' */
    b.eq    .Ldriver
.Lforward:
    adrp    x9, vramspill_real_dlsym_pointer
    ldr     x9, [x9, :lo12:vramspill_real_dlsym_pointer]
    cbz     x9, .Ldriver
    br      x9
.Ldriver:
    b       vramspill_dlsym_driver_symbol
    .cfi_endproc
#else
#error "vramspill's dlsym entry is written for x86-64 and AArch64 only"
#endif
    .size vramspill_dlsym_entry, . - vramspill_dlsym_entry
    .size vramspill_dlsym_entry_default, . - vramspill_dlsym_entry_default
    .section .note.GNU-stack, "", @progbits
