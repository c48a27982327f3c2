/* HMAC-SHA1 (RFC 2104 over FIPS 180-4's SHA-1) of a short message, for plain ACL's request
 * signatures: checked in the broker's send fast path (mqcore/_send_core.pxi, SendAcl) and written
 * by the client's signed send templates (mqcore/_wire_client.pyx, SendTemplate).
 *
 * Why not OpenSSL's: through Python's _hashlib each signature of a 100-byte send costs an
 * HMAC context copy (three digest contexts allocated), four method calls, a second copy inside
 * digest() and the frees - several microseconds, where the hashing is five 64-byte blocks.
 * Here the key's inner and outer states are set up once per account (mq_hmac_sha1_key) and a
 * signature is the blocks themselves. Only short messages come here (the caller sends longer
 * ones to OpenSSL, whose SHA-1 uses the CPU's SHA extensions); the tests check that the two
 * verify the same signatures (tests/broker/test_acl_send_core.py, around block boundaries). */
#ifndef MQCORE_SHA1_H
#define MQCORE_SHA1_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MQ_ROL(x, n) (((x) << (n)) | ((x) >> (32 - (n))))

static void mq_sha1_block(uint32_t st[5], const unsigned char *p) {
    uint32_t w[80], a, b, c, d, e, t;
    int i;
    for (i = 0; i < 16; i++)
        w[i] = ((uint32_t)p[4 * i] << 24) | ((uint32_t)p[4 * i + 1] << 16) | ((uint32_t)p[4 * i + 2] << 8) | p[4 * i + 3];
    for (i = 16; i < 80; i++)
        w[i] = MQ_ROL(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    a = st[0]; b = st[1]; c = st[2]; d = st[3]; e = st[4];
    for (i = 0; i < 20; i++) {
        t = MQ_ROL(a, 5) + ((b & c) | (~b & d)) + e + 0x5A827999u + w[i];
        e = d; d = c; c = MQ_ROL(b, 30); b = a; a = t;
    }
    for (; i < 40; i++) {
        t = MQ_ROL(a, 5) + (b ^ c ^ d) + e + 0x6ED9EBA1u + w[i];
        e = d; d = c; c = MQ_ROL(b, 30); b = a; a = t;
    }
    for (; i < 60; i++) {
        t = MQ_ROL(a, 5) + ((b & c) | (b & d) | (c & d)) + e + 0x8F1BBCDCu + w[i];
        e = d; d = c; c = MQ_ROL(b, 30); b = a; a = t;
    }
    for (; i < 80; i++) {
        t = MQ_ROL(a, 5) + (b ^ c ^ d) + e + 0xCA62C1D6u + w[i];
        e = d; d = c; c = MQ_ROL(b, 30); b = a; a = t;
    }
    st[0] += a; st[1] += b; st[2] += c; st[3] += d; st[4] += e;
}

/* SHA-1 of (the 64 bytes already folded into st) + a + b, as the 20-byte digest in out. */
static void mq_sha1_finish(uint32_t st[5], const unsigned char *a, size_t alen, const unsigned char *b,
                           size_t blen, unsigned char out[20]) {
    unsigned char buf[64];
    size_t fill = 0, take;
    uint64_t bits = ((uint64_t)64 + alen + blen) * 8;
    const unsigned char *parts[2] = {a, b};
    size_t lens[2] = {alen, blen};
    int k, i;
    for (k = 0; k < 2; k++) {
        const unsigned char *p = parts[k];
        size_t n = lens[k];
        if (!n) continue;
        if (fill) {
            take = 64 - fill < n ? 64 - fill : n;
            memcpy(buf + fill, p, take);
            fill += take; p += take; n -= take;
            if (fill < 64) continue;
            mq_sha1_block(st, buf);
            fill = 0;
        }
        while (n >= 64) {
            mq_sha1_block(st, p);
            p += 64; n -= 64;
        }
        if (n) memcpy(buf, p, n);
        fill = n;
    }
    buf[fill++] = 0x80;
    if (fill > 56) {
        memset(buf + fill, 0, 64 - fill);
        mq_sha1_block(st, buf);
        fill = 0;
    }
    memset(buf + fill, 0, 56 - fill);
    for (i = 0; i < 8; i++)
        buf[56 + i] = (unsigned char)(bits >> (56 - 8 * i));
    mq_sha1_block(st, buf);
    for (i = 0; i < 5; i++) {
        out[4 * i] = (unsigned char)(st[i] >> 24); out[4 * i + 1] = (unsigned char)(st[i] >> 16);
        out[4 * i + 2] = (unsigned char)(st[i] >> 8); out[4 * i + 3] = (unsigned char)st[i];
    }
}

static const uint32_t MQ_SHA1_IV[5] = {0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u};

/* The key's states after its inner (ipad) and outer (opad) blocks. */
static void mq_hmac_sha1_key(const unsigned char *key, size_t klen, uint32_t inner[5], uint32_t outer[5]) {
    unsigned char k[64], blk[64], digest[20];
    uint32_t st[5];
    int i;
    memset(k, 0, 64);
    if (klen > 64) {  /* a long key is its SHA-1 */
        memcpy(st, MQ_SHA1_IV, sizeof st);
        /* mq_sha1_finish counts 64 bytes already folded: fold the first 64 key bytes first */
        mq_sha1_block(st, key);
        mq_sha1_finish(st, key + 64, klen - 64, NULL, 0, digest);
        memcpy(k, digest, 20);
    } else {
        memcpy(k, key, klen);
    }
    for (i = 0; i < 64; i++) blk[i] = k[i] ^ 0x36;
    memcpy(inner, MQ_SHA1_IV, 5 * sizeof(uint32_t));
    mq_sha1_block(inner, blk);
    for (i = 0; i < 64; i++) blk[i] = k[i] ^ 0x5c;
    memcpy(outer, MQ_SHA1_IV, 5 * sizeof(uint32_t));
    mq_sha1_block(outer, blk);
}

/* HMAC-SHA1(key, a + b) from the key's states. */
static void mq_hmac_sha1(const uint32_t inner[5], const uint32_t outer[5], const unsigned char *a, size_t alen,
                         const unsigned char *b, size_t blen, unsigned char out[20]) {
    uint32_t st[5];
    unsigned char ih[20];
    memcpy(st, inner, sizeof st);
    mq_sha1_finish(st, a, alen, b, blen, ih);
    memcpy(st, outer, sizeof st);
    mq_sha1_finish(st, ih, 20, NULL, 0, out);
}
/* One Base64 character (RFC 4648's alphabet: A-Z, a-z, 0-9, '+', '/') of a 6-bit value. */
static char mq_b64_char(uint32_t v) {
    return (char)(v < 26 ? 'A' + v : v < 52 ? 'a' + (v - 26) : v < 62 ? '0' + (v - 52) : v == 62 ? '+' : '/');
}

/* Base64 of a 20-byte digest (a signature's 28 characters, one '=' of padding) into out: what
 * the broker's check compares with and the client's signed send template writes. */
static void mq_b64_digest20(const unsigned char d[20], char out[28]) {
    uint32_t v;
    int i, o = 0;
    for (i = 0; i < 18; i += 3) {
        v = ((uint32_t)d[i] << 16) | ((uint32_t)d[i + 1] << 8) | d[i + 2];
        out[o] = mq_b64_char((v >> 18) & 63); out[o + 1] = mq_b64_char((v >> 12) & 63);
        out[o + 2] = mq_b64_char((v >> 6) & 63); out[o + 3] = mq_b64_char(v & 63);
        o += 4;
    }
    v = ((uint32_t)d[18] << 16) | ((uint32_t)d[19] << 8);
    out[24] = mq_b64_char((v >> 18) & 63); out[25] = mq_b64_char((v >> 12) & 63);
    out[26] = mq_b64_char((v >> 6) & 63); out[27] = '=';
}
#endif
