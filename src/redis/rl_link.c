/*-------------------------------------------------------------------------
 *
 * rl_link.c
 *	  The bytes of one node's link: plain TCP through hiredis, or TLS.
 *
 * hiredis (0.14.1, as Debian ships it, has no TLS) still builds the
 * commands, into its context's output buffer, and parses the replies, with
 * its reader; only the bytes take another road when ratelimit.redis_tls is
 * on: OpenSSL runs over the context's own non-blocking socket.  Nothing
 * here ever waits: each step does what the socket allows now and says
 * what it needs next (RL_IO_WANT_READ/WRITE), and rl_roundtrip.c waits for it
 * on the latch, so cancel, statement_timeout and postmaster death reach a
 * backend mid-handshake as they do mid-read.
 *
 * The server's certificate is always verified, and so is its name
 * (redis_tls_server_name, else the host connected to): a link to a server
 * that cannot prove who it is would hand it the password.  The SSL_CTX is
 * made for one set of TLS settings and made again when they change, when
 * one of its files changed since it read them (a certificate or CA
 * rotated in place: another inode, size or modification time), and after
 * a handshake that failed on a certificate, so a long-lived backend picks
 * up rotated files at its next connection.
 *
 * The same settings serve every node of every mode: the standalone
 * server, each cluster node, each Sentinel and the master the Sentinels
 * name.  Without redis_tls_server_name each node is checked against the
 * address it is reached at, as CLUSTER SLOTS, MOVED or the Sentinel gave
 * it (an IP address against the certificate's IP entries); with it, that
 * one name is checked on, and sent as SNI to, all of them, as a managed
 * service whose nodes share a certificate for one name needs.
 *
 * In redis/'s order, bottom first (test/layers.sh's ORDER; rl_conn.c's
 * banner), this file is the bottom: it calls no other file of redis/.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_link.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <hiredis/sds.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "utils/memutils.h"

#include "rl_guc.h"
#include "rl_link.h"

/* One file of the TLS settings as the context read it. */
typedef struct RlTlsFileId
{
	dev_t		dev;
	ino_t		ino;
	off_t		size;
	struct timespec mtime;		/* all zero: no file (or none set) */
} RlTlsFileId;

/* The context of the current TLS settings, those settings and files. */
static SSL_CTX *rl_tls_ctx = NULL;
static char *rl_tls_ctx_settings = NULL;
static RlTlsFileId rl_tls_ctx_files[3];	/* CA, certificate, key */

/* The setting the last TLS failure points at, or NULL (an outage). */
static const char *rl_tls_setting = NULL;

/*
 * OpenSSL asks for a key's passphrase on the terminal by default, which
 * would hang a backend: an encrypted key is refused instead.
 */
static int
rl_tls_no_passphrase(char *buf, int size, int rwflag, void *userdata)
{
	return 0;
}

/*
 * The reason of the first queued OpenSSL error that has one (a system
 * error by its errno text), clearing the queue.
 */
static const char *
rl_tls_reason(void)
{
	static char buf[128];
	const char *reason = NULL;
	unsigned long e;

	while (reason == NULL && (e = ERR_get_error()) != 0)
	{
		if (ERR_SYSTEM_ERROR(e))
		{
			strlcpy(buf, strerror(ERR_GET_REASON(e)), sizeof(buf));
			reason = buf;
		}
		else
			reason = ERR_reason_error_string(e);
	}
	ERR_clear_error();
	return reason != NULL ? reason : "unknown TLS error";
}

/*
 * Empties OpenSSL's error queue before a step, as SSL_get_error needs.
 * ERR_clear_error walks all of the queue's slots, which a warm call paid
 * three times; the queue is nearly always empty already.
 */
static inline void
rl_tls_clear(void)
{
	if (ERR_peek_error() != 0)
		ERR_clear_error();
}

/*
 * What the file at path is now (all zero when path is empty or stat
 * fails: the load then says why).  A certificate rotated in place changes
 * at least one of these: a new file moved over it (inode), or one
 * rewritten (size, modification time).
 */
static void
rl_tls_file_id(const char *path, RlTlsFileId *id)
{
	struct stat st;

	memset(id, 0, sizeof(*id));
	if (path[0] == '\0' || stat(path, &st) != 0)
		return;
	id->dev = st.st_dev;
	id->ino = st.st_ino;
	id->size = st.st_size;
	id->mtime = st.st_mtim;
}

/* Drops the SSL_CTX, so the next TLS connection reads the files again. */
void
rl_tls_forget(void)
{
	if (rl_tls_ctx != NULL)
		SSL_CTX_free(rl_tls_ctx);
	rl_tls_ctx = NULL;
	if (rl_tls_ctx_settings != NULL)
		pfree(rl_tls_ctx_settings);
	rl_tls_ctx_settings = NULL;
}

/*
 * Makes the SSL_CTX for the current TLS settings, unless it is there and
 * its files are as it read them: the CA file (else the system's
 * authorities), the client certificate and key.  False, with the setting
 * to fix and the reason, when a file cannot be used; no context is kept
 * then, so the next attempt reads them again.  Three stat calls per new
 * connection, none per call.
 */
bool
rl_tls_prepare(const char **setting, char *why, size_t whysize)
{
	char	   *settings;
	SSL_CTX    *ctx;
	RlTlsFileId files[3];

	settings = psprintf("%s\n%s\n%s", rl_redis_tls_ca_file,
						rl_redis_tls_cert_file, rl_redis_tls_key_file);
	/* Taken before the files are read: a change meanwhile reloads again. */
	rl_tls_file_id(rl_redis_tls_ca_file, &files[0]);
	rl_tls_file_id(rl_redis_tls_cert_file, &files[1]);
	rl_tls_file_id(rl_redis_tls_key_file, &files[2]);
	if (rl_tls_ctx != NULL && strcmp(settings, rl_tls_ctx_settings) == 0 &&
		memcmp(files, rl_tls_ctx_files, sizeof(files)) == 0)
	{
		pfree(settings);
		return true;
	}
	rl_tls_forget();

	*setting = NULL;
	ERR_clear_error();
	ctx = SSL_CTX_new(TLS_client_method());
	if (ctx == NULL)
	{
		snprintf(why, whysize, "could not make a TLS context: %s", rl_tls_reason());
		pfree(settings);
		return false;
	}
	(void) SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
					 SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_default_passwd_cb(ctx, rl_tls_no_passphrase);
	/*
	 * One read per burst of records, not two per record (header, body):
	 * a warm call's reply costs one read(2), as over plain TCP.  Measured
	 * (test/bench/tls.sh's servers, interleaved slices): the saved read
	 * is within the noise at c=1 (0.828 against 0.824 of TCP's rate).
	 *
	 * The cipher lists stay OpenSSL's defaults (the server picks
	 * TLS_AES_256_GCM_SHA384 from them): preferring AES-128-GCM made no
	 * difference beyond the noise (0.801 against 0.796 at c=1, then
	 * 0.828 against 0.828).  Leaving out a warm call's two error-queue
	 * checks (about 40 ns each) gave 0.838 in that run, within its
	 * spread: they stay, since SSL_get_error needs an empty queue and
	 * other code in a backend may leave errors there.  What a warm TLS call
	 * costs beyond plain TCP is OpenSSL's work per record on both sides
	 * and Redis's two reads per record, none of it ours to remove.
	 */
	SSL_CTX_set_read_ahead(ctx, 1);

	if (rl_redis_tls_ca_file[0] != '\0' ?
		SSL_CTX_load_verify_locations(ctx, rl_redis_tls_ca_file, NULL) != 1 :
		SSL_CTX_set_default_verify_paths(ctx) != 1)
	{
		*setting = "ratelimit.redis_tls_ca_file";
		snprintf(why, whysize, "could not load the certificate authorities of ratelimit.redis_tls_ca_file \"%s\": %s",
				 rl_redis_tls_ca_file, rl_tls_reason());
	}
	else if ((rl_redis_tls_cert_file[0] == '\0') != (rl_redis_tls_key_file[0] == '\0'))
	{
		*setting = "ratelimit.redis_tls_cert_file and ratelimit.redis_tls_key_file";
		snprintf(why, whysize, "a client certificate needs both ratelimit.redis_tls_cert_file and ratelimit.redis_tls_key_file");
	}
	else if (rl_redis_tls_cert_file[0] != '\0' &&
			 SSL_CTX_use_certificate_chain_file(ctx, rl_redis_tls_cert_file) != 1)
	{
		*setting = "ratelimit.redis_tls_cert_file";
		snprintf(why, whysize, "could not load the client certificate of ratelimit.redis_tls_cert_file \"%s\": %s",
				 rl_redis_tls_cert_file, rl_tls_reason());
	}
	else if (rl_redis_tls_key_file[0] != '\0' &&
			 (SSL_CTX_use_PrivateKey_file(ctx, rl_redis_tls_key_file, SSL_FILETYPE_PEM) != 1 ||
			  SSL_CTX_check_private_key(ctx) != 1))
	{
		*setting = "ratelimit.redis_tls_key_file";
		snprintf(why, whysize, "could not load the private key of ratelimit.redis_tls_key_file \"%s\" (an encrypted key is not supported): %s",
				 rl_redis_tls_key_file, rl_tls_reason());
	}
	if (*setting != NULL)
	{
		SSL_CTX_free(ctx);
		pfree(settings);
		return false;
	}
	rl_tls_ctx = ctx;
	rl_tls_ctx_settings = MemoryContextStrdup(TopMemoryContext, settings);
	memcpy(rl_tls_ctx_files, files, sizeof(files));
	pfree(settings);
	return true;
}

/*
 * A TLS session over the context's connected socket, set to verify the
 * server's name: redis_tls_server_name, else host.  A name is also sent
 * as SNI; an IP address is checked against the certificate's IP entries.
 * NULL (errstr set) when OpenSSL cannot make one.
 */
SSL *
rl_tls_start(redisContext *c, const char *host)
{
	const char *name = rl_redis_tls_server_name[0] != '\0' ?
		rl_redis_tls_server_name : host;
	unsigned char addr[sizeof(struct in6_addr)];
	SSL		   *ssl;
	bool		ok;

	Assert(rl_tls_ctx != NULL);
	ERR_clear_error();
	ssl = SSL_new(rl_tls_ctx);
	if (ssl == NULL)
	{
		snprintf(c->errstr, sizeof(c->errstr), "TLS: %s", rl_tls_reason());
		return NULL;
	}
	if (inet_pton(AF_INET, name, addr) == 1 || inet_pton(AF_INET6, name, addr) == 1)
		ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1;
	else
		ok = SSL_set_tlsext_host_name(ssl, name) == 1 &&
			SSL_set1_host(ssl, name) == 1;
	if (!ok || SSL_set_fd(ssl, c->fd) != 1)
	{
		snprintf(c->errstr, sizeof(c->errstr), "TLS: %s", rl_tls_reason());
		SSL_free(ssl);
		return NULL;
	}
	SSL_set_connect_state(ssl);
	return ssl;
}

/*
 * What a failed TLS step means, into errstr, and the setting it points
 * at (rl_tls_error_setting): a certificate that did not verify (which
 * check failed, from OpenSSL's own words), a server that refused our
 * client certificate or wanted one, a peer that does not speak TLS.
 * After a certificate failed either way the context is dropped, so the
 * next attempt reads the files again: a rotation that kept a file's
 * size and modification time is picked up then.
 */
static RlIo
rl_tls_failed(SSL *ssl, redisContext *c, int ret)
{
	int			err = SSL_get_error(ssl, ret);
	long		verify = SSL_get_verify_result(ssl);
	unsigned long e = ERR_peek_error();
	int			reason = ERR_GET_REASON(e);

	if (err == SSL_ERROR_WANT_READ)
		return RL_IO_WANT_READ;
	if (err == SSL_ERROR_WANT_WRITE)
		return RL_IO_WANT_WRITE;

	rl_tls_setting = NULL;
	if (err == SSL_ERROR_SSL && verify != X509_V_OK)
	{
		if (verify == X509_V_ERR_HOSTNAME_MISMATCH ||
			verify == X509_V_ERR_IP_ADDRESS_MISMATCH)
			rl_tls_setting = "ratelimit.redis_tls_server_name";
		else if (verify == X509_V_ERR_CERT_HAS_EXPIRED ||
				 verify == X509_V_ERR_CERT_NOT_YET_VALID)
			rl_tls_setting = "the Redis server's tls-cert-file";
		else
			rl_tls_setting = "ratelimit.redis_tls_ca_file";
		snprintf(c->errstr, sizeof(c->errstr),
				 "TLS: the server's certificate did not verify: %s",
				 X509_verify_cert_error_string(verify));
		ERR_clear_error();
		rl_tls_forget();
		return RL_IO_ERROR;
	}
	if (err == SSL_ERROR_ZERO_RETURN ||
		(err == SSL_ERROR_SYSCALL && e == 0 && ret == 0) ||
		(err == SSL_ERROR_SSL && reason == SSL_R_UNEXPECTED_EOF_WHILE_READING))
	{
		ERR_clear_error();
		snprintf(c->errstr, sizeof(c->errstr), "Server closed the connection");
		return RL_IO_ERROR;
	}
	if (err == SSL_ERROR_SYSCALL && e == 0)
	{
		snprintf(c->errstr, sizeof(c->errstr), "%s", strerror(errno));
		return RL_IO_ERROR;
	}
	switch (reason)
	{
		case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
		case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
		case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
		case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
		case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
			rl_tls_setting = "ratelimit.redis_tls_cert_file and ratelimit.redis_tls_key_file";
			rl_tls_forget();
			break;
		case SSL_R_WRONG_VERSION_NUMBER:
		case SSL_R_PACKET_LENGTH_TOO_LONG:
		case SSL_R_HTTP_REQUEST:
			rl_tls_setting = "ratelimit.redis_tls";
			snprintf(c->errstr, sizeof(c->errstr),
					 "TLS: %s (the server does not seem to speak TLS on this port)",
					 rl_tls_reason());
			return RL_IO_ERROR;
		default:
			break;
	}
	snprintf(c->errstr, sizeof(c->errstr), "TLS: %s", rl_tls_reason());
	return RL_IO_ERROR;
}

/* The setting the last failed TLS step points at, or NULL. */
const char *
rl_tls_error_setting(void)
{
	return rl_tls_setting;
}

/* One step of the handshake; RL_IO_DONE once it is complete. */
RlIo
rl_tls_handshake(SSL *ssl, redisContext *c)
{
	int			ret;

	rl_tls_setting = NULL;
	ERR_clear_error();
	ret = SSL_connect(ssl);
	if (ret == 1)
		return RL_IO_DONE;
	return rl_tls_failed(ssl, c, ret);
}

/*
 * Frees a session without the closing alert: the socket is closed (or
 * reset) right after, and an alert is one more write that could block.
 */
void
rl_tls_close(SSL *ssl)
{
	SSL_free(ssl);
	ERR_clear_error();
}

/*
 * A write that met a reset right after the handshake: with TLS 1.3 the
 * server checks our certificate only then, and its alert (certificate
 * required, unknown CA) is still queued before the reset.  Reading it
 * turns "connection reset" into the reason and the setting to fix.
 */
static void
rl_tls_why_reset(SSL *ssl, redisContext *c)
{
	char		buf[256];
	char		saved[sizeof(c->errstr)];
	int			n;

	strlcpy(saved, c->errstr, sizeof(saved));
	ERR_clear_error();
	n = SSL_read(ssl, buf, sizeof(buf));
	if (n <= 0 && SSL_get_error(ssl, n) == SSL_ERROR_SSL &&
		rl_tls_failed(ssl, c, n) == RL_IO_ERROR && rl_tls_setting != NULL)
		return;
	strlcpy(c->errstr, saved, sizeof(c->errstr));
	rl_tls_setting = NULL;
	ERR_clear_error();
}

/*
 * Writes what the socket takes now of the commands hiredis has buffered:
 * RL_IO_DONE once all are out.
 */
RlIo
rl_link_write(redisContext *c, SSL *ssl)
{
	int			done = 0;

	if (ssl == NULL)
	{
		if (redisBufferWrite(c, &done) == REDIS_ERR)
			return RL_IO_ERROR;
		return done ? RL_IO_DONE : RL_IO_WANT_WRITE;
	}

	rl_tls_setting = NULL;
	while (sdslen(c->obuf) > 0)
	{
		size_t		len = Min(sdslen(c->obuf), (size_t) INT_MAX);
		int			n;

		rl_tls_clear();
		n = SSL_write(ssl, c->obuf, (int) len);
		if (n <= 0)
		{
			RlIo		io = rl_tls_failed(ssl, c, n);

			if (io == RL_IO_ERROR && rl_tls_setting == NULL)
				rl_tls_why_reset(ssl, c);
			return io;
		}
		sdsrange(c->obuf, n, -1);
	}
	return RL_IO_DONE;
}

/*
 * Reads what has arrived into hiredis's reader, then says what to wait
 * for before reading again.  Plain TCP reads once, as hiredis does; TLS
 * reads until OpenSSL holds nothing (it reads ahead), because what it
 * holds would not wake a wait on the socket.  It stops
 * early once the reader holds more than limit bytes (the caller refuses
 * such a reply).
 */
RlIo
rl_link_read(redisContext *c, SSL *ssl, size_t limit)
{
	char		buf[16 * 1024];

	if (ssl == NULL)
	{
		if (redisBufferRead(c) == REDIS_ERR)
			return RL_IO_ERROR;
		return RL_IO_WANT_READ;
	}

	rl_tls_setting = NULL;
	for (;;)
	{
		int			n;

		rl_tls_clear();
		n = SSL_read(ssl, buf, sizeof(buf));
		if (n <= 0)
			return rl_tls_failed(ssl, c, n);
		if (redisReaderFeed(c->reader, buf, n) != REDIS_OK)
		{
			snprintf(c->errstr, sizeof(c->errstr), "%s", c->reader->errstr);
			return RL_IO_ERROR;
		}
		if (c->reader->len - c->reader->pos > limit)
			return RL_IO_WANT_READ;

		/*
		 * Once OpenSSL holds nothing (no decrypted byte, no record read
		 * ahead), the socket's readiness tells the rest: no read just to
		 * learn EAGAIN.
		 */
		if (!SSL_has_pending(ssl))
			return RL_IO_WANT_READ;
	}
}

/*
 * True when an idle link is still good: nothing to read, no close.  A
 * TLS link may hold session tickets the server sent after the
 * handshake, which OpenSSL takes in here; any data is stray.  A socket
 * with nothing to read and nothing held by OpenSSL is answered by the
 * peek alone, as plain TCP is: a warm call pays no SSL_read for it.
 */
bool
rl_link_idle_ok(redisContext *c, SSL *ssl)
{
	char		byte;
	int			n;
	ssize_t		r;

	r = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
	if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		return false;
	if (ssl == NULL)
		return r < 0;
	if (r < 0 && !SSL_has_pending(ssl))
		return true;
	rl_tls_clear();
	n = SSL_read(ssl, &byte, 1);
	if (n <= 0 && SSL_get_error(ssl, n) == SSL_ERROR_WANT_READ)
	{
		ERR_clear_error();
		return true;
	}
	ERR_clear_error();
	return false;
}
