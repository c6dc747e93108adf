/* Test infrastructure only, never shipped with toolhost.
 *
 * Rust's std (since 1.78) draws random bytes from bcryptprimitives.dll's
 * ProcessPrng. Wine 8 (Debian 12's wine64) has no such DLL, so no Rust program
 * built for Windows starts under it. This shim exports ProcessPrng on top of
 * advapi32's SystemFunction036 (RtlGenRandom), which Wine implements.
 * scripts/wine/setup builds it with mingw and puts it in the test prefix's
 * system32. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
