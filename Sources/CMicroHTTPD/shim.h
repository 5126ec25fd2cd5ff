#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdarg.h>
#include <microhttpd.h>

/*
 * Non-variadic wrappers for the HTTPServer target: Swift cannot call C
 * variadic functions such as MHD_get_daemon_info / MHD_get_connection_info.
 */

/* The port the daemon actually bound (useful when port 0 was requested); 0 if unknown. */
static inline uint16_t cmhd_daemon_bind_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info != NULL ? info->port : 0;
}

/* The HTTP status of the response queued on a connection (including MHD's own
   error replies such as 400 or 431); 0 if no response is queued. */
static inline unsigned int cmhd_connection_http_status(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_HTTP_STATUS);
    return info != NULL ? info->http_status : 0;
}
