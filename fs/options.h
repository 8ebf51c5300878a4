/**
 * fs/options.h - the command line of the daemon (private to fs).
 * Each -o option is a row of options.def (name, type, default, bounds,
 * help), from which options.c makes the parser, the checks and --help.
 *
 *   hintfs s3://BUCKET[/PREFIX] MOUNTPOINT [-f] [-d] [-o opt[,opt...]]
 *
 * Parsing is separate from main() so that it can be unit-tested: it reads
 * argv, the AWS_* environment variables and the AWS profile files
 * (aws_config.h), checks every value, and
 * leaves the options it does not own (allow_other, ...) in fuse_args for
 * fuse_session_new(), which rejects unknown ones.
 */
#ifndef HINTFS_FS_OPTIONS_H
#define HINTFS_FS_OPTIONS_H

#include "prefetch/s3/aws_config.h"
#include "prefetch/s3/creds_chain.h"

#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct hintfs_opts {
	/* From the command line; malloc'd. */
	char *source;	  /**< "s3://bucket/prefix" as given */
	char *mountpoint; /**< as given */
	char *endpoint;	  /**< -o endpoint=, else AWS_ENDPOINT_URL_S3 or
			       AWS_ENDPOINT_URL, else AWS's for the region */
	char *region;	  /**< -o region=, else AWS_REGION, AWS_DEFAULT_REGION,
			       else us-east-1 */
	char *ca_file;	  /**< -o ca_file= */
	char *max_threads_str;
	char *cache_dir;      /**< -o cache_dir=; else derived (see resolve) */
	char *cache_size_str; /**< -o cache_size=BYTES[K|M|G|T] or N% */
	char *hint_file;      /**< -o hint=FILE: watched and re-read */
	char *ctl_socket;     /**< -o ctl_socket=PATH, or NULL: default */
	char *max_inflight_str; /**< -o max_inflight=N */
	char *window_str;	/**< -o window=N objects ahead */
	char *net_threads_str;	/**< -o net_threads=N */
	char *pace_str;		/**< -o pace_ms=MS */
	char *fetch_mem_str;	/**< -o fetch_mem=SIZE */
	char *profile; /**< -o profile= / --profile: AWS profile name */
	char *credentials_file; /**< -o credentials_file=: replaces
				     AWS_SHARED_CREDENTIALS_FILE */
	char *config_file;    /**< -o config_file=: replaces AWS_CONFIG_FILE */
	char *retries_str;    /**< -o retries=N attempts per request */
	char *retry_time_str; /**< -o retry_time=S seconds per request */
	char *stall_timeout_str;   /**< -o stall_timeout=S */
	char *list_workers_str;	   /**< -o list_workers=N */
	char *process_timeout_str; /**< -o credential_process_timeout=S */
	char *store_ahead_str;	   /**< -o store_ahead=SIZE */
	/* NOTE(fuse): fuse_opt stores flag templates as int: these three
	 * must be int, or setting one overwrites its neighbours. */
	int path_style;	   /**< -o path_style, or implied by an IP endpoint */
	int no_sign;	   /**< -o no_sign: anonymous requests */
	int insecure;	   /**< -o insecure: no TLS verification */
	int relist;	   /**< -o relist: list again, not from the cache */
	int open_per_file; /**< -o open_per_file: OPEN and RELEASE per file */
	int passthrough;   /**< -o passthrough: FUSE passthrough of hits */
	bool foreground;   /**< -f (or -d) */
	bool debug;	   /**< -d / -o debug: debug log and FUSE trace */
	bool help;
	bool version;
	/** The name of an option that looks like a credential (-o
	 *  secret_key=...): refused by name, its value never echoed. */
	char secret_opt[32];

	/* Derived by opts_parse(). A number is the option's value, else its
	 * default from options.def: never 0 for "a default elsewhere". */
	char *bucket;		  /**< malloc'd */
	char *prefix;		  /**< malloc'd; "" or ends in '/' */
	unsigned int max_threads; /**< FUSE worker threads */
	unsigned int max_inflight;
	unsigned int net_threads; /**< 0: from the cores (the engine) */
	uint32_t window;	  /**< objects */
	uint32_t pace_ms;	  /**< pf_config.pace_ms: PF_PACE_OFF for
				       pace_ms=0 */
	uint64_t fetch_mem;	  /**< bytes */
	int retries;		  /**< attempts per request */
	int retry_time_s;
	int stall_timeout_s;
	int list_workers;
	uint64_t cache_size;	     /**< bytes; 0: cache_size_pct of the free
					  space, decided once the directory
					  exists */
	unsigned int cache_size_pct; /**< N of "N%", else 0 */
	uint64_t store_ahead;	     /**< bytes pushed into the kernel's page
					  cache ahead of opens; 0: off */

	/** The credential providers in the SDKs' order (creds_chain.h),
	 *  owned until creds_start() takes them; none with -o no_sign. */
	struct creds_provider *creds_chain[CREDS_CHAIN_MAX];
	size_t n_creds_chain;
	int process_timeout_s;

	/* Static keys from the environment or the profile (aws_config.h),
	 * for messages and tests; point into @aws, NULL with -o no_sign.
	 * The daemon signs with what creds_start() chose. */
	const char *access_key;
	const char *secret_key;
	const char *session_token;
	struct aws_config aws;

	/* The shared cache tier (-o shared_cache=s3://BUCKET[/PREFIX]). */
	char *shared_cache;   /**< as given, or NULL: no tier */
	char *tier_endpoint;  /**< -o shared_cache_endpoint=; resolved:
				   the profile's, else the origin's */
	char *tier_region;    /**< -o shared_cache_region=; likewise */
	char *tier_profile;   /**< -o shared_cache_profile=: its own
				   credentials; else the origin's */
	char *tier_hedge_str; /**< -o shared_cache_hedge_ms=MS */
	char *tier_key_file;  /**< -o shared_cache_key=FILE */
	char *tier_key;	      /**< its bytes (a secret: wiped on
				   opts_fini()), or NULL */
	size_t tier_key_len;
	char *tier_put_mem_str; /**< -o shared_cache_put_mem=BYTES */
	uint64_t tier_put_mem;	/**< bytes */
	char *tier_bucket;	/**< derived: malloc'd */
	char *tier_prefix;	/**< derived: "" or ends in '/' */
	unsigned int tier_hedge_ms;
	int tier_path_style;
	struct aws_config tier_aws; /**< the tier profile's, if named */
	bool tier_aws_loaded;
	struct creds_provider *tier_chain[CREDS_CHAIN_MAX]; /**< with a tier
					profile; creds_start() takes them */
	size_t n_tier_chain;

	struct fuse_args fuse_args; /**< what fuse_session_new() gets */
};

/**
 * Parses @argc/@argv and the environment into @o (zeroed by the call).
 * Returns 0, or -EINVAL with a one-line reason in @err (@err_len bytes).
 * Release @o with opts_fini() in both cases. Not thread-safe (getenv).
 */
int opts_parse(int argc, char **argv, struct hintfs_opts *o, char *err,
	       size_t err_len);

/** Frees what opts_parse() allocated. */
void opts_fini(struct hintfs_opts *o);

/** Writes the usage text, its option lines made from options.def, to
 *  @out. */
void opts_usage(FILE *out, const char *prog);

#endif /* HINTFS_FS_OPTIONS_H */
