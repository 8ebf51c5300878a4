/*
 * prefetch/s3/s3_status.c - the one-line description of a failed request
 * that a user reads (s3_status_describe(), s3.h). Apart from s3_error.c
 * and without curl: the engine, which links no curl, logs its failures
 * with it.
 */
#include "prefetch/s3/s3.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void s3_status_describe(const struct s3_status *st, int err, char *buf,
			size_t len)
{
	const char *hint = "";

	switch (err) {
	case -EACCES:
		if (!strcmp(st->code, "SignatureDoesNotMatch"))
			hint = " (check AWS_SECRET_ACCESS_KEY)";
		else if (!strcmp(st->code, "InvalidAccessKeyId"))
			hint = " (check AWS_ACCESS_KEY_ID)";
		else if (!strcmp(st->code, "RequestTimeTooSkewed"))
			hint = " (check the system clock)";
		else if (!strcmp(st->code, "ExpiredToken"))
			hint = " (no fresh credentials came; see the log)";
		break;
	case -ECONNREFUSED:
	case -EHOSTUNREACH:
		hint = " (is the endpoint right and the server up?)";
		break;
	default:
		break;
	}
	if (st->http)
		snprintf(buf, len, "%s%s%s (HTTP %ld)%s",
			 st->code[0] ? st->code : "error",
			 st->message[0] ? ": " : "", st->message, st->http,
			 hint);
	else
		snprintf(buf, len, "%s%s",
			 st->message[0] ? st->message : strerror(-err), hint);
}
