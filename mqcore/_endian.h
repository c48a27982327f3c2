/* Big-endian loads and stores through memcpy: RocketMQ's units put 8-byte
 * fields at 4-aligned offsets (the consume queue's tagsCode at 12), so we never
 * dereference a cast pointer. */
#ifndef MQCORE_ENDIAN_H
#define MQCORE_ENDIAN_H
#include <stdint.h>
#include <string.h>

static inline int16_t mq_rd_i16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return (int16_t)__builtin_bswap16(v); }
static inline int32_t mq_rd_i32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return (int32_t)__builtin_bswap32(v); }
static inline int64_t mq_rd_i64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return (int64_t)__builtin_bswap64(v); }
static inline void mq_wr_i16(unsigned char *p, int16_t x) { uint16_t v = __builtin_bswap16((uint16_t)x); memcpy(p, &v, 2); }
static inline void mq_wr_i32(unsigned char *p, int32_t x) { uint32_t v = __builtin_bswap32((uint32_t)x); memcpy(p, &v, 4); }
static inline void mq_wr_i64(unsigned char *p, int64_t x) { uint64_t v = __builtin_bswap64((uint64_t)x); memcpy(p, &v, 8); }
/* Fault a page in for writing without changing it: a locked compare-and-swap of 0 with 0
 * always performs a write access, and stores only what is already there, so it is safe
 * even while another thread writes records into the same page. */
static inline void mq_touch_for_write(unsigned char *p) { (void)__sync_val_compare_and_swap(p, 0, 0); }
#endif
