/**
 * common/utf8.h - one code point to UTF-8, for the JSON readers that
 * decode \uXXXX escapes (prefetch/s3/creds_parse.c, hintfs-ctl's json.c).
 * Header-only: hintfs-ctl's JSON library links nothing else of common/.
 */
#ifndef HINTFS_COMMON_UTF8_H
#define HINTFS_COMMON_UTF8_H

#include <stddef.h>
#include <stdint.h>

/**
 * Writes code point @cp (below 0x110000, not a surrogate: the caller
 * checks) as UTF-8 into @out. Returns the bytes written, 1 to 4. Pure.
 */
static inline size_t utf8_put(uint32_t cp, char out[4])
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

#endif /* HINTFS_COMMON_UTF8_H */
