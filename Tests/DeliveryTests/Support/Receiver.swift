import Foundation
import HTTPServer
import Synchronization

/// A real HTTP receiver on 127.0.0.1 (HTTPServer, port 0) that records every request and
/// answers with what the test tells it.
final class Receiver: Sendable {
    struct Call: Sendable {
        var method: String
        var path: String
        var rawPath: String
        var headers: [String: String]
        var body: [UInt8]
        func header(_ name: String) -> String? { headers[name.lowercased()] }
    }

    /// Answers the request; `index` counts the calls, from 0.
    typealias Responder = @Sendable (HTTPRequest, _ index: Int) async -> HTTPResponse

    private final class Book: Sendable {
        struct State {
            var calls: [Call] = []
            var responder: Responder
        }
        let state: Mutex<State>
        init(_ responder: @escaping Responder) { state = Mutex(State(responder: responder)) }
    }

    private let book: Book
    private let server: HTTPServer

    static let ok: Responder = { _, _ in HTTPResponse(status: 200, body: Array("ok".utf8)) }

    init(_ responder: @escaping Responder = Receiver.ok) throws {
        let book = Book(responder)
        self.book = book
        server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0, threads: 2)) { request in
            let (index, responder) = book.state.withLock { s in
                s.calls.append(Call(method: request.method, path: request.path, rawPath: request.rawPath,
                                    headers: request.headers, body: request.body))
                return (s.calls.count - 1, s.responder)
            }
            return await responder(request, index)
        }
    }

    deinit { server.shutdown(drainTimeout: 0) }

    var port: UInt16 { server.port }
    var base: String { "http://127.0.0.1:\(server.port)" }
    var hookURL: String { base + "/hooks/rewards" }

    var calls: [Call] { book.state.withLock { $0.calls } }
    var count: Int { calls.count }

    func respond(_ responder: @escaping Responder) { book.state.withLock { $0.responder = responder } }

    /// Answers every call with `status`.
    func answer(_ status: Int, _ body: String = "") {
        respond { _, _ in HTTPResponse(status: status, body: Array(body.utf8)) }
    }

    func stop() { server.shutdown(drainTimeout: 0) }

    /// A URL on 127.0.0.1 where nothing listens (a receiver started and stopped at once).
    static func closedPortURL() throws -> String {
        let receiver = try Receiver()
        let url = receiver.hookURL
        receiver.stop()
        return url
    }
}
