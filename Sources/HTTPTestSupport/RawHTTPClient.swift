#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Test support shared by the HTTP server's and the ledger server's tests (not shipped in the
/// library product).
///
/// A deliberately dumb, blocking HTTP/1.1 client over a raw TCP socket, so
/// tests can send exactly the bytes they want: partial requests, stalls,
/// chunked bodies, garbage.
public final class RawHTTPClient {
    public struct Failure: Error, CustomStringConvertible {
        public var operation: String
        public var code: Int32
        public var description: String { "\(operation) failed: \(String(cString: strerror(code))) (\(code))" }
        public var isConnectionRefused: Bool { operation == "connect" && code == ECONNREFUSED }
    }

    public struct Response {
        public var status: Int
        /// Lowercased names.
        public var headers: [String: String]
        public var body: [UInt8]
        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    private let socket: Int32
    private var buffered: [UInt8] = []

    /// Connects to 127.0.0.1:`port`; reads give up after `timeout` seconds.
    public init(port: UInt16, timeout: Double = 10) throws {
        socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw Failure(operation: "socket", code: errno) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            let code = errno
            Glibc.close(socket)
            throw Failure(operation: "connect", code: code)
        }
        setTimeout(timeout)
    }

    deinit { Glibc.close(socket) }

    public func setTimeout(_ seconds: Double) {
        var value = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - seconds.rounded(.down)) * 1e6))
        _ = setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
        _ = setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
    }

    public func send(_ text: String) throws { try send(Array(text.utf8)) }

    public func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes {
                Glibc.send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            guard sent > 0 else { throw Failure(operation: "send", code: errno) }
            offset += sent
        }
    }

    /// Sends a whole request with `Content-Length` (when there is a body).
    public func sendRequest(_ method: String, _ target: String, headers: [(String, String)] = [],
                     body: [UInt8] = []) throws {
        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
        try send(Array((head + "\r\n").utf8) + body)
    }

    /// Reads one response framed by Content-Length (or by close when absent); `toHead`: the request
    /// was HEAD, so no body follows whatever the headers say.
    public func readResponse(toHead: Bool = false) throws -> Response {
        let headerEnd = try readUntil(Array("\r\n\r\n".utf8))
        let head = String(decoding: buffered[..<headerEnd], as: UTF8.self)
        buffered.removeFirst(headerEnd + 4)
        var lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw Failure(operation: "parse status line '\(head)'", code: EPROTO)
        }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].lowercased()
            let value = line[line.index(after: colon)...].trimmingPrefix(" ")
            headers[name] = headers[name].map { $0 + ", " + value } ?? String(value)
        }
        let body: [UInt8]
        if toHead || status == 204 || status == 304 || (100..<200).contains(status) {
            body = []  // no body by definition, and no Content-Length either
        } else if let length = headers["content-length"].flatMap({ Int($0) }) {
            while buffered.count < length {
                guard try fill() else { throw Failure(operation: "read body", code: ECONNRESET) }
            }
            body = Array(buffered[..<length])
            buffered.removeFirst(length)
        } else {
            while try fill() {}
            body = buffered
            buffered = []
        }
        return Response(status: status, headers: headers, body: body)
    }

    /// Waits for the server to close the connection; true if it did (EOF or
    /// reset) before the read timeout, discarding anything sent meanwhile.
    public func waitForClose() -> Bool {
        while true {
            do {
                if try !fill() { return true }
            } catch let failure as Failure {
                return failure.code == ECONNRESET
            } catch {
                return false
            }
        }
    }

    /// Reads more bytes into the buffer; false on orderly close.
    private func fill() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        let count = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
        if count < 0 { throw Failure(operation: "recv", code: errno) }
        if count == 0 { return false }
        buffered += chunk[..<count]
        return true
    }

    private func readUntil(_ marker: [UInt8]) throws -> Int {
        while true {
            if let index = firstIndex(of: marker) { return index }
            guard try fill() else { throw Failure(operation: "read headers", code: ECONNRESET) }
        }
    }

    private func firstIndex(of marker: [UInt8]) -> Int? {
        guard buffered.count >= marker.count else { return nil }
        for start in 0...(buffered.count - marker.count)
        where buffered[start..<(start + marker.count)].elementsEqual(marker) {
            return start
        }
        return nil
    }

    /// One request on a fresh connection.
    public static func request(port: UInt16, _ method: String, _ target: String, headers: [(String, String)] = [],
                        body: [UInt8] = [], timeout: Double = 10) throws -> Response {
        let client = try RawHTTPClient(port: port, timeout: timeout)
        try client.sendRequest(method, target, headers: headers, body: body)
        return try client.readResponse(toHead: method == "HEAD")
    }
}

#if canImport(Foundation)
import Foundation

/// Runs `body(0..<count)` on `count` dedicated threads (blocking socket I/O must not sit on
/// Swift's small cooperative pool) and waits for all of them.
public func runOnThreads(_ count: Int, stackSize: Int = 512 * 1024, _ body: @escaping @Sendable (Int) -> Void) {
    let group = DispatchGroup()
    for index in 0..<count {
        group.enter()
        let thread = Thread {
            body(index)
            group.leave()
        }
        thread.stackSize = stackSize
        thread.start()
    }
    group.wait()
}
#endif
