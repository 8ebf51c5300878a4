/**
 * prefetch/s3/s3_xml.h - parsers for S3's XML bodies (private to
 * prefetch/s3).
 *
 * ListObjectsV2 results and error documents, parsed with expat. The parsers
 * take the whole body in memory (a list page is <= ~1 MB for 1,000 keys)
 * and never trust it: a malformed or hostile document gives -EPROTO and a
 * one-line reason, never a crash or a partial result.
 *
 * All functions are thread-safe; each call uses its own expat parser.
 */
#ifndef HINTFS_PREFETCH_S3_S3_XML_H
#define HINTFS_PREFETCH_S3_S3_XML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** One <Contents> element. */
struct s3_list_entry {
	char *key;	/**< malloc'd, decoded (url form when the page says
			     <EncodingType>url), NUL-terminated;
			     may hold any byte, even a NUL (%00): the
			     namespace, not the parser, refuses such keys */
	size_t key_len; /**< bytes in key, without the NUL */
	uint64_t size;	/**< <Size> */
	int64_t mtime;	/**< <LastModified> in seconds since the epoch, UTC */
	char *etag;	/**< malloc'd, exactly as sent, quotes included */
};

/** One <CommonPrefixes><Prefix> of a page listed with a delimiter. */
struct s3_list_prefix {
	char *prefix; /**< malloc'd, decoded like keys, NUL-terminated */
	size_t len;   /**< bytes in prefix, without the NUL */
};

/** One ListObjectsV2 page. */
struct s3_list_page {
	struct s3_list_entry *entries; /**< malloc'd array of n_entries */
	size_t n_entries;
	struct s3_list_prefix *prefixes; /**< malloc'd array of n_prefixes */
	size_t n_prefixes;
	bool truncated;	  /**< <IsTruncated>true */
	char *next_token; /**< malloc'd <NextContinuationToken>, raw (never
			       decoded: it is opaque), or NULL */
};

/**
 * Parses a ListObjectsV2 page of @len bytes. When the page says
 * <EncodingType>url</EncodingType> (what a server that honours the
 * request's encoding-type=url sends, anywhere in the page), <Key> values
 * are form-decoded ('+' is a space, %XX a byte); without it they are taken
 * as sent. On success returns 0 and fills @out (caller frees with
 * s3_list_page_fini()). On failure returns -EPROTO (not XML, wrong root
 * element, a v1 page, a <Contents> without <Key>, a bad number or date, an
 * unknown <EncodingType>, a bad %-escape) or -ENOMEM, writes a one-line
 * reason into @err (of @err_len bytes) and leaves @out empty.
 */
int s3_list_parse(const char *body, size_t len, struct s3_list_page *out,
		  char *err, size_t err_len);

/** Frees everything in @page and zeroes it. Accepts a zeroed page. */
void s3_list_page_fini(struct s3_list_page *page);

/** The fields of an S3 <Error> document that the client uses. */
struct s3_error_doc {
	char code[64];	   /**< <Code>, e.g. "NoSuchKey"; "" if absent */
	char message[256]; /**< <Message>, cut to fit; "" if absent */
};

/**
 * Parses an error body. Returns 0 when it is an <Error> document (fields
 * cut to fit, control characters replaced by spaces), -EPROTO otherwise
 * (empty body, HTML from a proxy, ...) or -ENOMEM, leaving @out with
 * empty strings.
 */
int s3_error_parse(const char *body, size_t len, struct s3_error_doc *out);

/**
 * Parses an ISO 8601 UTC time as S3 sends it ("2009-10-12T17:50:30.000Z",
 * fraction optional) into seconds since the epoch. Returns 0 or -EINVAL.
 */
int s3_parse_time(const char *s, int64_t *out);

/**
 * Form-decodes @len bytes of @in ('+' -> space, %XX -> byte) into a
 * malloc'd string (NUL-terminated; its length in *@out_len, which counts
 * any decoded NUL). Returns NULL with errno EINVAL for a bad escape,
 * ENOMEM when out of memory.
 */
char *s3_form_decode(const char *in, size_t len, size_t *out_len);

#endif /* HINTFS_PREFETCH_S3_S3_XML_H */
