/* CRC-32 (the IEEE/zlib polynomial, reflected: what RocketMQ's BODYCRC and zlib.crc32 compute)
 * of a buffer, folded with carry-less multiplies where the CPU has them.
 *
 * Why: a record's BODYCRC covers the whole body, and zlib 1.2's table-driven crc32 runs at
 * 0.4-1.5 GB/s on this class of VM: at 1 MiB bodies it was the largest single cost of a send
 * (14 % of the broker's CPU), where the Java broker's CRC32 intrinsic folds with PCLMULQDQ.
 * This is the folding method of Intel's paper "Fast CRC Computation for Generic Polynomials
 * Using PCLMULQDQ Instruction" (Gopal et al., 2009): four 128-bit lanes folded 64 bytes at a
 * time, reduced to one lane, then to 64 and 32 bits with a Barrett reduction. The constants
 * are x^k mod P(x) for the distances folded over, bit-reflected (they are the paper's):
 *   k1 = x^(4*128+32) mod P, k2 = x^(4*128-32) mod P   (fold 4 lanes by 512 bits)
 *   k3 = x^(128+32) mod P,   k4 = x^(128-32) mod P     (fold one lane by 128 bits)
 *   k5 = x^64 mod P                                     (128 -> 64 bits)
 *   P' = the polynomial, u' = floor(x^64 / P)           (Barrett, 64 -> 32 bits)
 * Lengths below 64 bytes, the tail past the last 16-byte block and CPUs without PCLMULQDQ
 * and SSE4.1 go to zlib's crc32, so the result is zlib's for every input; the tests compare
 * the two on random lengths and alignments (tests/test_crc32.py). */
#ifndef MQCORE_CRC32_H
#define MQCORE_CRC32_H
#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MQ_CRC32_CLMUL 1

__attribute__((target("pclmul,sse4.1")))
static uint32_t mq_crc32_clmul(const unsigned char *buf, size_t len, uint32_t crc)
{
    /* len >= 64 and a multiple of 16; crc is the running value already inverted */
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i mask32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;

    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = k1k2;
    buf += 64;
    len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }
    /* four lanes into one */
    x0 = k3k4;
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    /* the remaining 16-byte blocks */
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 -> 64 bits */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, mask32);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    /* Barrett: 64 -> 32 bits */
    x0 = poly;
    x2 = _mm_and_si128(x1, mask32);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, mask32);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

static int mq_crc32_has_clmul(void)
{
    static int cached = -1;  /* a benign race: every thread computes the same answer */
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    }
    return cached;
}
#endif

/* zlib.crc32(data, crc) for any length (lengths past 4 GiB are taken in pieces) */
static inline uint32_t mq_crc32(uint32_t crc, const unsigned char *buf, size_t len)
{
#ifdef MQ_CRC32_CLMUL
    if (len >= 64 && mq_crc32_has_clmul()) {
        size_t chunk = len & ~(size_t)15;
        crc = ~mq_crc32_clmul(buf, chunk, ~crc);
        buf += chunk;
        len -= chunk;
    }
#endif
    while (len) {
        unsigned int n = len > 0x40000000u ? 0x40000000u : (unsigned int)len;
        crc = (uint32_t)crc32(crc, buf, n);
        buf += n;
        len -= n;
    }
    return crc;
}
#endif
