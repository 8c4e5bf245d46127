/*
 * extql_primitives_c.h - the primitives' plain C bodies: the compiler's
 * own loops, no streaming stores.
 * Included by extql_primitives.h only, which documents the primitives;
 * every body gives the same bits.
 */
#ifndef EXTQL_PRIMITIVES_C_H
#define EXTQL_PRIMITIVES_C_H

#define EXTQL_HAVE_STREAM 0
/* The widest vectors the compiler's loops of the baseline use (SSE2). */
#define EXTQL_VECTOR_BYTES 16

static inline void extql_store_i8(int8_t *dst, const int32_t *t, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = (int8_t)t[k];
}
static inline void extql_store_u8(uint8_t *dst, const int32_t *t, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = (uint8_t)t[k];
}
static inline void extql_store_i16(int16_t *dst, const int32_t *t, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = (int16_t)t[k];
}
static inline void extql_store_u16(uint16_t *dst, const int32_t *t, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = (uint16_t)t[k];
}
static inline void extql_store_32(void *dst, const void *t, int64_t n, int stream) {
  (void)stream;
  memcpy(dst, t, (size_t)n * 4);
}
static inline void extql_store_f16(uint16_t *dst, const float *t, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = extql_f32_to_f16(t[k]);
}
static inline void extql_store_bf16(uint16_t *dst, const float *t, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = extql_f32_to_bf16(t[k]);
}
static inline void extql_load_i8(int32_t *t, const int8_t *src, int64_t n) {
  for (int64_t k = 0; k < n; k++) t[k] = src[k];
}
static inline void extql_load_u8(int32_t *t, const uint8_t *src, int64_t n) {
  for (int64_t k = 0; k < n; k++) t[k] = src[k];
}
static inline void extql_load_i16(int32_t *t, const int16_t *src, int64_t n) {
  for (int64_t k = 0; k < n; k++) t[k] = src[k];
}
static inline void extql_load_u16(int32_t *t, const uint16_t *src, int64_t n) {
  for (int64_t k = 0; k < n; k++) t[k] = src[k];
}
static inline void extql_widen_f16(float *t, const uint16_t *src, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) t[k] = extql_f16_to_f32(src[k]);
}
static inline void extql_widen_bf16(float *t, const uint16_t *src, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) t[k] = extql_bits_f32((uint32_t)src[k] << 16);
}
static inline void extql_cast_f16(uint16_t *dst, const float *x, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = extql_f32_to_f16(extql_sat_value(x[k], 65504.0f));
}
static inline void extql_cast_bf16(uint16_t *dst, const float *x, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++)
    dst[k] = extql_f32_to_bf16(extql_sat_value(x[k], extql_bits_f32(0x7F7F0000u)));
}
static inline void extql_round_f16(float *t, int64_t n) {
  for (int64_t k = 0; k < n; k++) t[k] = extql_f16_to_f32(extql_f32_to_f16(t[k]));
}
static inline void extql_fill_32(void *p, uint32_t v, int64_t n) {
  for (int64_t k = 0; k < n; k++) ((uint32_t *)p)[k] = v;
}
static inline void extql_stream32(void *dst, const void *src) { memcpy(dst, src, 32); }
static inline void extql_store_fence(void) {}

/* The 32-bit quantize with the zero point 0 from a tile of quotients. */
static inline void extql_store_wide_i32(int32_t *dst, const float *t, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = extql_wide_i32_one(t[k]);
}
static inline void extql_store_wide_u32(uint32_t *dst, const float *t, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = extql_wide_u32_one(t[k]);
}

#endif /* EXTQL_PRIMITIVES_C_H */
