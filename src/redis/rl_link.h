/*-------------------------------------------------------------------------
 *
 * rl_link.h
 *	  The bytes of one node's link: plain TCP through hiredis, or TLS.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_link.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_LINK_H
#define RL_LINK_H

#include <hiredis/hiredis.h>
#include <openssl/ssl.h>

/* What a non-blocking step of a link needs before it can go on. */
typedef enum RlIo
{
	RL_IO_DONE,					/* finished (or, reading: all there is) */
	RL_IO_WANT_READ,			/* wait until the socket is readable */
	RL_IO_WANT_WRITE,			/* wait until the socket is writeable */
	RL_IO_ERROR					/* broken: the context's errstr says why */
} RlIo;

extern bool rl_tls_prepare(const char **setting, char *why, size_t whysize);
extern void rl_tls_forget(void);
extern SSL *rl_tls_start(redisContext *c, const char *host);
extern RlIo rl_tls_handshake(SSL *ssl, redisContext *c);
extern void rl_tls_close(SSL *ssl);
extern const char *rl_tls_error_setting(void);
extern RlIo rl_link_write(redisContext *c, SSL *ssl);
extern RlIo rl_link_read(redisContext *c, SSL *ssl, size_t limit);
extern bool rl_link_idle_ok(redisContext *c, SSL *ssl);

#endif							/* RL_LINK_H */
