/// The way back to one request's client, for a handler that answers later or on another thread
/// (`HTTPServer(configuration:answering:)`).
///
/// Call `respond` exactly once, from any thread: the response is handed to the connection's
/// worker, which sends it. Later calls are ignored, as is a call after the server answered the
/// request itself (503 `shutting_down` at the end of a drain). Respond promptly: the connection
/// waits, and a server shutting down waits for it (up to its drain timeout).
public struct HTTPResponder: Sendable {
    let core: ServerCore
    let context: RequestContext

    public func respond(_ response: HTTPResponse) {
        core.deliver(response, to: context)
    }
}
