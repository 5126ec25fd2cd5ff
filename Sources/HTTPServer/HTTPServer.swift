import CMicroHTTPD
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A routing-agnostic HTTP/1.1 server on libmicrohttpd.
///
/// Threading: libmicrohttpd's own worker threads (`Configuration.threads`, each
/// with its own poll loop) do all socket I/O and body buffering. When a
/// request is complete the worker suspends the connection and hands the
/// request to the handler: an `async` handler runs as a Swift `Task`, so a
/// slow handler never holds a worker thread; an `answering:` handler is called
/// on the worker thread itself and answers through an `HTTPResponder` when it
/// likes, from any thread (no hop through the task pool when the answer comes
/// from a thread of the application's own, such as a database writer). The
/// response is handed back under a lock and the connection resumed (MHD wakes
/// the owning worker through its eventfd), and the worker queues the response
/// on its next pass.
///
/// `@unchecked Sendable`: the only mutable state lives in `ServerCore` behind a
/// mutex; the daemon pointer is immutable after `init`, and libmicrohttpd
/// allows `MHD_quiesce_daemon` / `MHD_stop_daemon` from any thread.
public final class HTTPServer: @unchecked Sendable {
    /// The port actually bound (useful when port 0 was asked for).
    public let port: UInt16

    private let core: ServerCore
    private let daemon: OpaquePointer
    /// The reference MHD's callbacks use; released once the daemon is stopped.
    private let coreForCallbacks: Unmanaged<ServerCore>

    /// Starts listening immediately; `handler` is called for every request whose
    /// body fits `maxBodyBytes`, in a task of its own.
    public convenience init(
        configuration: Configuration,
        handler: @escaping @Sendable (HTTPRequest) async -> HTTPResponse
    ) throws {
        try self.init(configuration: configuration, answering: { request, responder in
            Task { responder.respond(await handler(request)) }
        })
    }

    /// Starts listening immediately; `handler` is called on the connection's I/O
    /// thread for every request whose body fits `maxBodyBytes`, and answers through
    /// the responder exactly once, now or later, from any thread. It must not block
    /// (the thread serves other connections): work that waits belongs elsewhere,
    /// answering when done.
    public init(
        configuration: Configuration,
        answering handler: @escaping @Sendable (HTTPRequest, HTTPResponder) -> Void
    ) throws {
        try Self.validate(configuration)
        let address = try ListenAddress(host: configuration.host, port: configuration.port)
        let core = ServerCore(configuration: configuration, handler: handler)
        let coreForCallbacks = Unmanaged.passRetained(core)

        // poll, not epoll: with epoll, MHD_quiesce_daemon races a worker that is
        // taking the listen socket out of its epoll set (at the connection limit)
        // and MHD aborts the process ("Failed to remove listen FD from epoll set"),
        // seen under load at shutdown. poll rescans every connection per wake-up,
        // which costs with hundreds of idle clients, but never aborts.
        var flags = MHD_USE_INTERNAL_POLLING_THREAD.rawValue
            | MHD_USE_POLL.rawValue
            | MHD_ALLOW_SUSPEND_RESUME.rawValue  // implies MHD_USE_ITC, which quiesce needs too
            | MHD_USE_ITC.rawValue
            | MHD_USE_ERROR_LOG.rawValue  // messages go to `MHDCallbacks.logger`
        if address.isIPv6 { flags |= MHD_USE_IPv6.rawValue }

        let started: OpaquePointer? = address.withSocketAddress { socketAddress in
            let closure = OpaquePointer(coreForCallbacks.toOpaque())
            // MHD_start_daemon is variadic, which Swift cannot call: build the
            // (option, value...) list for MHD_start_daemon_va. Each value must
            // have the C type MHD reads with va_arg: unsigned int, size_t, pointers.
            var options: [CVarArg] = [
                MHD_OPTION.SOCK_ADDR.rawValue, socketAddress,
                MHD_OPTION.CONNECTION_TIMEOUT.rawValue, CUnsignedInt(configuration.connectionTimeoutSeconds),
                MHD_OPTION.CONNECTION_LIMIT.rawValue, CUnsignedInt(configuration.maxConnections),
                MHD_OPTION.PER_IP_CONNECTION_LIMIT.rawValue, CUnsignedInt(configuration.maxConnectionsPerClient),
                MHD_OPTION.URI_LOG_CALLBACK.rawValue,
                unsafeBitCast(MHDCallbacks.uriLogged, to: OpaquePointer.self), closure,
                MHD_OPTION.NOTIFY_COMPLETED.rawValue,
                unsafeBitCast(MHDCallbacks.requestCompleted, to: OpaquePointer.self), closure,
                MHD_OPTION.EXTERNAL_LOGGER.rawValue,
                unsafeBitCast(MHDCallbacks.logger, to: OpaquePointer.self), closure,
            ]
            if configuration.threads > 1 {
                options += [MHD_OPTION.THREAD_POOL_SIZE.rawValue, CUnsignedInt(configuration.threads)]
            }
            options.append(MHD_OPTION.END.rawValue)
            return withVaList(options) { arguments in
                MHD_start_daemon_va(flags, configuration.port, nil, nil,
                                    MHDCallbacks.accessHandler, coreForCallbacks.toOpaque(), arguments)
            }
        }
        let startupMessages = core.finishStartup()
        guard let started else {
            coreForCallbacks.release()
            let reason = startupMessages.last ?? "libmicrohttpd could not start"
            throw HTTPServerError(
                code: .startFailed,
                message: "cannot listen on \(configuration.host):\(configuration.port): \(reason)")
        }
        self.core = core
        self.daemon = started
        self.coreForCallbacks = coreForCallbacks
        self.port = cmhd_daemon_bind_port(started)
    }

    /// Stops without draining if `shutdown` was never called.
    deinit {
        shutdown(drainTimeout: 0)
    }

    /// Stops accepting connections (new connects are refused at once), lets
    /// in-flight requests finish and be answered for up to `seconds`, then stops
    /// the daemon. At the deadline `atDeadline` runs (the application cancels
    /// the work its handlers still wait for, so they answer at once), and the
    /// handlers get `grace` seconds more to answer; requests whose handler has
    /// still not answered are then answered 503 (`shutting_down`) if that can
    /// be sent within a short grace, and their handlers' results are dropped.
    /// Responses sent while draining carry `Connection: close`.
    ///
    /// Blocks the calling thread until the daemon is stopped. Idempotent; a
    /// concurrent second call waits for the first to finish. Fine from a
    /// `DispatchSource` signal handler. Do not call it from `accessLog` (an MHD
    /// thread: deadlock) nor from a request handler (it would wait for that
    /// very request until the drain timeout).
    public func shutdown(drainTimeout seconds: Double = 10, atDeadline: (() -> Void)? = nil, grace: Double = 5) {
        guard core.beginDrain() else {
            core.waitUntilStopped()
            return
        }
        // Quiesce: MHD stops polling the listen socket and hands it to us. Shut
        // it down too, so connects are refused (RST) instead of sitting in the
        // backlog; close it only after the daemon is stopped, so the descriptor
        // number cannot be reused while a worker might still touch it.
        let listenSocket = MHD_quiesce_daemon(daemon)
        if listenSocket >= 0 { refuseConnections(on: listenSocket) }

        let drain = Duration.nanoseconds(Int64((min(max(0, seconds), 1e6) * 1e9).rounded()))
        if !core.waitForOpenRequests(until: .now + drain), let atDeadline {
            atDeadline()
            let extra = Duration.nanoseconds(Int64((min(max(0, grace), 1e6) * 1e9).rounded()))
            _ = core.waitForOpenRequests(until: .now + extra)
        }
        // From here on no connection gets suspended, and the ones still waiting
        // for a handler are resumed with a 503: MHD aborts the process if it is
        // stopped while a connection is suspended. Give those 503s a moment.
        if core.abandonWaitingRequests() > 0 {
            _ = core.waitForOpenRequests(until: .now + .milliseconds(250))
        }

        MHD_stop_daemon(daemon)
        if listenSocket >= 0 { _ = close(listenSocket) }
        core.markStopped()
        coreForCallbacks.release()
    }

    private static func validate(_ configuration: Configuration) throws(HTTPServerError) {
        func invalid(_ message: String) -> HTTPServerError {
            HTTPServerError(code: .invalidConfiguration, message: message)
        }
        guard configuration.maxBodyBytes >= 0 else { throw invalid("maxBodyBytes must not be negative") }
        guard (1...1024).contains(configuration.threads) else { throw invalid("threads must be 1...1024") }
        // MHD splits the connection limit between its worker threads.
        guard configuration.maxConnections >= configuration.threads,
              configuration.maxConnections <= Int(UInt32.max) else {
            throw invalid("maxConnections must be at least threads")
        }
        guard (0...Int(UInt32.max)).contains(configuration.maxConnectionsPerClient) else {
            throw invalid("maxConnectionsPerClient must be 0 (no limit of its own) or more")
        }
    }
}

/// Stops a listening socket from completing handshakes, so clients are refused
/// at once (Linux). A free function because `HTTPServer.shutdown` shadows the C one.
private func refuseConnections(on listenSocket: Int32) {
    _ = shutdown(listenSocket, Int32(SHUT_RDWR))
}
